package bsr_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/table"
)

// plantedSector is a sector with a planted change: after tick at's step,
// change edits its tables (it reports whether it found what to change).
type plantedSector struct {
	*broadside.Sector
	at      uint64
	change  func(ts []*table.Table) bool
	changed *atomic.Bool
}

func (s *plantedSector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	outs := s.Sector.Step(tick, cmds, rec)
	if tick == s.at && s.change(s.Tables().Tables()) {
		s.changed.Store(true)
	}
	return outs
}

func (s *plantedSector) Hash() uint64 { return s.Tables().Hash() }

// firstLive edits the first live record of table k (meta, players,
// ships, motion, balls) that ok accepts.
func firstLive(k int, ok func(table.Record) bool, edit func(table.Record)) func([]*table.Table) bool {
	return func(ts []*table.Table) bool {
		t := ts[k]
		for i := t.NextLive(0); i >= 0; i = t.NextLive(i + 1) {
			if ok == nil || ok(t.Row(i)) {
				edit(t.Mut(i))
				return true
			}
		}
		return false
	}
}

// divergenceCase is one planted divergence and what verify must name.
type divergenceCase struct {
	name   string
	at     uint64
	shard  int // -1: every shard (the first that has what to change)
	change func([]*table.Table) bool
	// inVerify plants the change in the sims verify re-simulates with
	// (a step that is nondeterministic) instead of the recording's.
	inVerify bool
	table    uint32
	offset   int
	field    string
	want     string // the recorded value, if checked
}

var divergenceCases = []divergenceCase{
	{name: "hull", at: 250, shard: 1, table: 3, offset: 16, field: "hull",
		change: firstLive(2, func(r table.Record) bool { return r.I16(16) > 1 }, func(r table.Record) { r.SetI16(16, r.I16(16)-1) })},
	{name: "position", at: 123, shard: 0, table: 5, offset: 0, field: "x",
		change: firstLive(3, nil, func(r table.Record) { r.SetI32(0, r.I32(0)+3) })},
	{name: "cannonball velocity", at: 205, shard: -1, table: 4, offset: 24, field: "vx",
		change: firstLive(4, nil, func(r table.Record) { r.SetI32(24, r.I32(24)-1) })},
	{name: "throttle", at: 311, shard: 3, table: 2, offset: 5, field: "throttle",
		change: firstLive(1, nil, func(r table.Record) { r.SetU8(5, r.U8(5)^1) })},
	{name: "ghost cannonball", at: 160, shard: 2, table: 4, offset: -1,
		change: func(ts []*table.Table) bool {
			i, err := ts[4].Alloc()
			if err == nil {
				ts[4].Mut(i).SetU64(0, 1<<40)
			}
			return err == nil
		}},
	{name: "nondeterministic step", at: 180, shard: 2, inVerify: true, table: 5, offset: 12, field: "heading",
		change: firstLive(3, nil, func(r table.Record) { r.SetU16(12, r.U16(12)^0x0100) })},
}

// TestFirstDivergenceExact plants one change at a tick T (in the recorded
// match, or in the re-simulation: a nondeterministic step) and requires
// verify to name T, that entity's table and that field, at T itself.
func TestFirstDivergenceExact(t *testing.T) {
	m := playMatch(t, smallWorld(2), 24, 400, 2)
	exact := 0
	for _, c := range divergenceCases {
		t.Run(c.name, func(t *testing.T) {
			var changed atomic.Bool
			planted := func(shard uint32) (replay.TableSim, error) {
				s, err := broadside.NewSector(m.cfg, int(shard))
				if c.shard < 0 || int(shard) == c.shard {
					return &plantedSector{Sector: s, at: c.at, change: c.change, changed: &changed}, err
				}
				return s, err
			}
			recSim, verSim := planted, m.newSim
			if c.inVerify {
				recSim, verSim = m.newSim, planted
			}
			path, _ := record(t, m, nil, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: 120, DeltaEvery: 30}}, recSim)
			r := open(t, path)
			if !r.HasFieldSums() {
				t.Fatal("the recording has no field sums")
			}
			res, err := bsr.Verify(context.Background(), r, verSim, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !changed.Load() {
				t.Fatalf("nothing to change at tick %d", c.at)
			}
			t.Log(res.Detail)
			if res.OK || !res.Exact || res.FirstTick != c.at || res.DiffTick != c.at || res.Table != c.table || res.Offset != c.offset ||
				(c.shard >= 0 && res.Shard != uint32(c.shard)) || res.Field != c.field {
				t.Fatalf("%+v", res)
			}
			exact++
		})
	}
	bsr.CountExact(exact, len(divergenceCases))
}

// TestFirstDivergenceRecordedValue: the recorded value of the changed
// field is reconstructed from the sums (hull 1 lower than re-simulated).
func TestFirstDivergenceRecordedValue(t *testing.T) {
	m := playMatch(t, smallWorld(2), 24, 300, 2)
	c := divergenceCases[0]
	var changed atomic.Bool
	path, _ := record(t, m, nil, bsr.RecordConfig{}, func(shard uint32) (replay.TableSim, error) {
		s, err := broadside.NewSector(m.cfg, int(shard))
		if int(shard) == c.shard {
			return &plantedSector{Sector: s, at: c.at, change: c.change, changed: &changed}, err
		}
		return s, err
	})
	res, err := bsr.Verify(context.Background(), open(t, path), m.newSim, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, got, ok := broadside.FieldValues(res.Table, res.Offset, res.WantBytes, res.GotBytes)
	if !res.Exact || !ok {
		t.Fatalf("%+v", res)
	}
	var w, g int
	if _, err := fmt.Sscan(want, &w); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(got, &g); err != nil {
		t.Fatal(err)
	}
	if w != g-1 {
		t.Fatalf("recorded hull %s, re-simulated %s", want, got)
	}
}

// TestFirstDivergenceWithoutFieldSums: a recording without field sums,
// re-simulated by a step that is nondeterministic (it changes a heading
// at tick T every other time it runs, as a step reading uninitialised
// memory or the clock would): verify re-simulates twice more, finds the
// two runs differ, and names T, that ship and the heading.
func TestFirstDivergenceWithoutFieldSums(t *testing.T) {
	m := playMatch(t, smallWorld(2), 24, 300, 2)
	path, _ := record(t, m, nil, bsr.RecordConfig{NoFieldSums: true, Snapshots: bsr.SnapshotPolicy{FullEvery: 120, DeltaEvery: 30}}, nil)
	r := open(t, path)
	if r.HasFieldSums() {
		t.Fatal("field sums recorded")
	}
	const at = 190
	var runs atomic.Int32
	flaky := func(shard uint32) (replay.TableSim, error) {
		s, err := broadside.NewSector(m.cfg, int(shard))
		if shard != 2 {
			return s, err
		}
		var changed atomic.Bool
		return &plantedSector{Sector: s, at: at, changed: &changed, change: func(ts []*table.Table) bool {
			if runs.Add(1)%2 == 0 {
				return false
			}
			return firstLive(3, nil, func(r table.Record) { r.SetU16(12, r.U16(12)^0x0100) })(ts)
		}}, err
	}
	res, err := bsr.Verify(context.Background(), r, flaky, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Detail)
	ok := !res.OK && res.Exact && res.FirstTick == at && res.DiffTick == at && res.Shard == 2 && res.Table == 5 && res.Field == "heading"
	n := 0
	if ok {
		n = 1
	}
	bsr.CountExact(n, 1)
	if !ok {
		t.Fatalf("%+v", res)
	}
}
