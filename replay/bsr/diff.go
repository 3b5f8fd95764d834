package bsr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// LineageEntities is implemented by sims that can say which lineage entity
// a record belongs to; Diff uses it to explain a difference by the
// commands in the entity's lineage.
type LineageEntities interface {
	LineageEntity(tableID uint32, slot int) (lineage.EntityID, bool)
}

// DiffConfig configures Diff.
type DiffConfig struct {
	// A and B are the recordings (typically an original and a fork of it).
	A, B *Reader
	// NewSim returns a fresh sim of shard (both recordings' game).
	NewSim func(shard uint32) (replay.TableSim, error)
	// MaxTicks bounds the ticks stepped after the first divergence (0:
	// to the end of the ticks both hold).
	MaxTicks uint64
	// MaxEntities bounds the entities listed (0: 10,000).
	MaxEntities int
	// MaxCauses bounds the commands listed per entity (0: 8).
	MaxCauses int
}

// DiffResult is the outcome of Diff.
type DiffResult struct {
	// From..To are the ticks both recordings hold, compared.
	From, To uint64
	// FirstTick is the first tick whose state differs in any shard (0:
	// none); Through the last tick stepped.
	FirstTick, Through uint64
	// Entities lists every entity that differs, by first tick, then
	// shard, then name.
	Entities []EntityDiff
	// Truncated says MaxEntities stopped the list.
	Truncated bool
}

// EntityDiff is one entity that differs between A and B.
type EntityDiff struct {
	Shard  uint32
	Entity string
	// FirstTick is the first tick it differs at; Fields the fields that
	// differ then ("" entries are not listed; "exists only in A/B" when
	// it is live on one side only).
	FirstTick uint64
	Fields    []string
	// Causes are the player commands in the entity's lineage up to
	// FirstTick (derivations followed) that only one of the recordings
	// holds: the commands that explain the difference.
	Causes []DiffCause
}

// DiffCause is a command one recording has and the other lacks.
type DiffCause struct {
	// In is "A" or "B": the recording that holds it; Pos its position
	// there.
	In     string
	Pos    uint64
	Player uint32
	Tick   uint64
	Kind   string
}

// Diff compares two recordings of the same world: it finds the first tick
// at which their recorded state hashes differ, steps both (with Seekers,
// the code that replays them) from there, compares the shards' tables
// record by record at every tick whose hashes differ, and lists every
// entity that differs with its first tick and fields, explained through
// lineage by the player commands only one of them holds.
func Diff(ctx context.Context, cfg DiffConfig) (DiffResult, error) {
	a, b := cfg.A, cfg.B
	var res DiffResult
	if a == nil || b == nil || cfg.NewSim == nil {
		return res, errors.New("bsr: diff: A, B and NewSim are required")
	}
	if a.h.World != b.h.World || a.h.Shards != b.h.Shards || a.h.Game != b.h.Game || !bytes.Equal(a.h.GameConfig, b.h.GameConfig) {
		return res, fmt.Errorf("bsr: diff: the recordings are not of the same world and game")
	}
	maxEnts := cfg.MaxEntities
	if maxEnts <= 0 {
		maxEnts = 10_000
	}
	maxCauses := cfg.MaxCauses
	if maxCauses <= 0 {
		maxCauses = 8
	}
	res.From, res.To = max(a.base, b.base)+1, min(a.last, b.last)
	if res.To < res.From {
		return res, fmt.Errorf("%w: the recordings hold no tick in common (%d..%d, %d..%d)", ErrOutOfRange, a.FirstTick(), a.last, b.FirstTick(), b.last)
	}
	shards := a.h.Shards
	differs := func(s uint32, t uint64) (bool, error) {
		ha, err := a.Hash(s, t)
		if err != nil {
			return false, err
		}
		hb, err := b.Hash(s, t)
		return ha != hb, err
	}
	for t := res.From; t <= res.To && res.FirstTick == 0; t++ {
		for s := range shards {
			d, err := differs(s, t)
			if err != nil {
				return res, err
			}
			if d {
				res.FirstTick = t
				break
			}
		}
	}
	if res.FirstTick == 0 {
		res.Through = res.To
		return res, nil
	}
	sa, err := NewSeeker(a, cfg.NewSim)
	if err != nil {
		return res, err
	}
	sb, err := NewSeeker(b, cfg.NewSim)
	if err != nil {
		return res, err
	}
	through := res.To
	if cfg.MaxTicks > 0 {
		through = min(through, res.FirstTick+cfg.MaxTicks-1)
	}
	type key struct {
		shard  uint32
		entity string
	}
	seen := map[key]int{} // index in res.Entities
	lineageIDs := map[int][2]lineage.EntityID{}
	for t := res.FirstTick; t <= through; t++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := sa.Seek(t); err != nil {
			return res, fmt.Errorf("bsr: diff: A: %w", err)
		}
		if err := sb.Seek(t); err != nil {
			return res, fmt.Errorf("bsr: diff: B: %w", err)
		}
		res.Through = t
		for s := range shards {
			if d, err := differs(s, t); err != nil {
				return res, err
			} else if !d {
				continue
			}
			simA, simB := sa.Sims()[s], sb.Sims()[s]
			for _, rd := range recordDiffs(simA, simB) {
				k := key{s, rd.entity}
				if _, ok := seen[k]; ok {
					continue
				}
				if len(res.Entities) == maxEnts {
					res.Truncated = true
					continue
				}
				seen[k] = len(res.Entities)
				var ids [2]lineage.EntityID
				for i, sim := range []replay.TableSim{simA, simB} {
					if le, ok := sim.(LineageEntities); ok {
						ids[i], _ = le.LineageEntity(rd.table, rd.slot)
					}
				}
				lineageIDs[len(res.Entities)] = ids
				res.Entities = append(res.Entities, EntityDiff{Shard: s, Entity: rd.entity, FirstTick: t, Fields: rd.fields})
			}
		}
	}
	if err := explain(a, b, &res, lineageIDs, maxCauses); err != nil {
		return res, err
	}
	sort.SliceStable(res.Entities, func(i, j int) bool {
		x, y := &res.Entities[i], &res.Entities[j]
		if x.FirstTick != y.FirstTick {
			return x.FirstTick < y.FirstTick
		}
		if x.Shard != y.Shard {
			return x.Shard < y.Shard
		}
		return x.Entity < y.Entity
	})
	return res, nil
}

type recordDiff struct {
	table  uint32
	slot   int
	entity string
	fields []string
}

// recordDiffs lists the records of two sims' tables that differ, named by
// the sims' Describer (the side where the record is live).
func recordDiffs(simA, simB replay.TableSim) []recordDiff {
	var out []recordDiff
	da, _ := simA.(Describer)
	db, _ := simB.(Describer)
	ta, tb := simA.Tables().Tables(), simB.Tables().Tables()
	for i := range min(len(ta), len(tb)) {
		x, y := ta[i], tb[i]
		if x.ID() != y.ID() || x.RecordSize() != y.RecordSize() {
			continue
		}
		for slot := range max(x.Slots(), y.Slots()) {
			la, lb := x.Live(slot), y.Live(slot)
			if !la && !lb {
				continue
			}
			namer, side := da, "A"
			if !la {
				namer, side = db, "B"
			}
			name := func(off int) (string, string) {
				if namer != nil {
					e, f := namer.DescribeRecord(x.ID(), slot, off)
					if e != "" {
						if f == "" && off >= 0 {
							f = fmt.Sprintf("byte %d", off)
						}
						return e, f
					}
				}
				return fmt.Sprintf("table %d slot %d", x.ID(), slot), fmt.Sprintf("byte %d", off)
			}
			if la != lb {
				e, _ := name(-1)
				out = append(out, recordDiff{table: x.ID(), slot: slot, entity: e, fields: []string{"exists only in " + side}})
				continue
			}
			ra, rb := x.Row(slot), y.Row(slot)
			if bytes.Equal(ra, rb) {
				continue
			}
			var e string
			var fields []string
			for off := range ra {
				if ra[off] == rb[off] {
					continue
				}
				var f string
				e, f = name(off)
				if !slices.Contains(fields, f) {
					fields = append(fields, f)
				}
			}
			out = append(out, recordDiff{table: x.ID(), slot: slot, entity: e, fields: fields})
		}
	}
	return out
}

// explain fills in each entity's causes: the player commands in its
// lineage (in A and in B, up to its first differing tick) whose record
// only one of the recordings holds.
func explain(a, b *Reader, res *DiffResult, ids map[int][2]lineage.EntityID, maxCauses int) error {
	if len(ids) == 0 {
		return nil
	}
	ixA, errA := a.Lineage()
	ixB, errB := b.Lineage()
	if errA != nil || errB != nil {
		return errors.Join(errA, errB)
	}
	idsA, err := a.recordIDs(res.From)
	if err != nil {
		return err
	}
	idsB, err := b.recordIDs(res.From)
	if err != nil {
		return err
	}
	for i := range res.Entities {
		ed := &res.Entities[i]
		pair := ids[i]
		for side, ix := range []*lineage.Index{ixA, ixB} {
			e := pair[side]
			if e == 0 {
				continue
			}
			why, err := ix.Why(lineage.ShardID(ed.Shard), e, ed.FirstTick, 4)
			if err != nil {
				continue // not in this side's lineage (live on the other side only)
			}
			own, other, name := idsA, idsB, "A"
			if side == 1 {
				own, other, name = idsB, idsA, "B"
			}
			for _, c := range why.AllCauses() {
				if c.Player == 0 || len(ed.Causes) >= maxCauses {
					continue
				}
				id, ok := own.byPos[c.Pos]
				if !ok {
					continue
				}
				if _, both := other.byID[id]; both {
					continue
				}
				dc := DiffCause{In: name, Pos: c.Pos, Player: c.Player, Tick: c.Tick, Kind: c.KindName}
				if !slices.Contains(ed.Causes, dc) {
					ed.Causes = append(ed.Causes, dc)
				}
			}
		}
	}
	return nil
}

// recordIDSet maps a recording's player commands from a tick on to their
// record ids and back.
type recordIDSet struct {
	byPos map[uint64]msg.RecordID
	byID  map[msg.RecordID]uint64
}

// recordIDs reads the recording's player commands that are inputs of
// ticks >= from.
func (r *Reader) recordIDs(from uint64) (recordIDSet, error) {
	set := recordIDSet{byPos: map[uint64]msg.RecordID{}, byID: map[msg.RecordID]uint64{}}
	for i := range r.cmds {
		c := &r.cmds[i]
		if c.Last < from {
			continue
		}
		entries, err := r.commandsChunk(c)
		if err != nil {
			return set, err
		}
		for _, e := range entries {
			env, err := wire.DecodeEnvelope(e.Record.Data)
			if err != nil || env.Kind != wire.EnvelopePlayerCommand {
				continue
			}
			set.byPos[e.Pos] = e.Record.ID
			set.byID[e.Record.ID] = e.Pos
		}
	}
	return set, nil
}
