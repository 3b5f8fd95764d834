package lineage

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Index answers lineage queries (Why, Affected, Frame) over a set of
// Ranges, typically everything a Store holds (LoadIndex). It is built once
// and read-only afterwards, so it is safe for concurrent queries; to see
// ranges stored later, load a new Index.
//
// Layout: every event is 16 bytes. Per entity, its commands and its
// derivations (what it was derived from) are two groups, and derivations
// are grouped once more by source (for Affected, which walks forwards).
// Each group is ordered by "when": the tick, then the shard, then the
// event's order within the shard's tick, packed into one uint64, so the
// history of an entity up to any point is a prefix found by binary search,
// whatever shards it crossed. Why walks derivations only and describes
// the commands as such prefixes, so its cost follows the derivations it
// follows, not the (often far more numerous) commands in the answer.
// Derivations refer to entities by their dense index: walks do no lookups.
type Index struct {
	base    uint64    // the earliest tick; "when" values count from it
	shards  []ShardID // dense shard index → id, sorted
	names   map[uint8]string
	horizon uint64
	ranges  []RangeInfo

	ents []EntityID // sorted: entities and derivation sources
	// ents[i]'s commands are cmdEvs[offs[i].cmd:offs[i+1].cmd] and its
	// derivations drvEvs[offs[i].drv:offs[i+1].drv] (interleaved, so a
	// walk reaching an entity touches one cache line for both).
	offs   []entOffs
	cmdEvs []ixEvent // arg: command position
	drvEvs []ixEvent // arg: the source's dense index

	// Per-query scratch (sized to the entities), kept for reuse: a
	// sync.Pool would drop it at every GC and make queries re-allocate.
	scratchMu   sync.Mutex
	scratchFree []*walkScratch

	outOffs []uint32  // ents[i]'s derivations are outs[outOffs[i]:outOffs[i+1]]
	outs    []ixEvent // arg: derived entity's dense index

	cmds  []ixCommand   // command events by position, then when
	infos []CommandInfo // inputs by position (one per position)

	frames []ixFrame // inputs per shard and range, by shard then tick
}

// ixEvent is an event in an Index.
type ixEvent struct {
	arg  uint64
	when uint64
}

// "when" packing: tick-base (32 bits) | shard index (8) | order in the
// shard's tick (23) | kind (1: derived).
const (
	whenSeqBits  = 23
	maxIndexSeq  = 1<<whenSeqBits - 1
	maxIndexShrd = 1 << 8
	whenDerived  = 1
)

func (ix *Index) when(tick uint64, shard int, seq int, derived bool) uint64 {
	w := (tick-ix.base)<<32 | uint64(shard)<<(whenSeqBits+1) | uint64(seq)<<1
	if derived {
		w |= whenDerived
	}
	return w
}

// tickEnd is the first "when" after tick.
func (ix *Index) tickEnd(tick uint64) uint64 {
	if tick < ix.base {
		return 0
	}
	if tick-ix.base >= math.MaxUint32 {
		return math.MaxUint64
	}
	return (tick - ix.base + 1) << 32
}

func (ix *Index) tickOf(when uint64) uint64 { return ix.base + when>>32 }

func (ix *Index) shardOf(when uint64) ShardID {
	return ix.shards[(when>>(whenSeqBits+1))&(maxIndexShrd-1)]
}

// entOffs are an entity's first command and first derivation in an
// Index.
type entOffs struct{ cmd, drv uint32 }

// cmdsOf returns entity ent's commands and drvsOf its derivations.
func (ix *Index) cmdsOf(ent uint32) []ixEvent { return ix.cmdEvs[ix.offs[ent].cmd:ix.offs[ent+1].cmd] }
func (ix *Index) drvsOf(ent uint32) []ixEvent { return ix.drvEvs[ix.offs[ent].drv:ix.offs[ent+1].drv] }

type ixCommand struct {
	pos    uint64
	when   uint64
	entity uint32
}

type ixFrame struct {
	shard     ShardID
	firstTick uint64
	ends      []uint32 // cumulative input counts per tick
	pos       []uint64
}

// IndexStats describes an Index.
type IndexStats struct {
	Shards, Ranges, Entities int
	Events, Derivations      int
	Inputs                   int
	FirstTick, LastTick      uint64
	// Bytes is the encoded size of the indexed ranges.
	Bytes int
}

// Stats describes ix.
func (ix *Index) Stats() IndexStats {
	st := IndexStats{Shards: len(ix.shards), Ranges: len(ix.ranges), Entities: len(ix.ents),
		Events: len(ix.cmdEvs) + len(ix.drvEvs), Derivations: len(ix.drvEvs), Inputs: len(ix.infos)}
	for i, r := range ix.ranges {
		if i == 0 || r.FirstTick < st.FirstTick {
			st.FirstTick = r.FirstTick
		}
		st.LastTick = max(st.LastTick, r.LastTick)
		st.Bytes += r.Bytes
	}
	return st
}

// Ranges describes the ranges ix was built from, by shard and tick.
func (ix *Index) Ranges() []RangeInfo { return slices.Clone(ix.ranges) }

// KindName returns the stored name of a command kind, or its number.
func (ix *Index) KindName(k uint8) string {
	if n, ok := ix.names[k]; ok {
		return n
	}
	return fmt.Sprintf("kind %d", k)
}

// LoadIndex reads and decodes every range of s and indexes them.
func LoadIndex(ctx context.Context, s Store) (*Index, error) {
	infos, err := s.Ranges(ctx)
	if err != nil {
		return nil, fmt.Errorf("lineage: load index: %w", err)
	}
	ranges := make([]*Range, 0, len(infos))
	for _, info := range infos {
		b, err := s.GetRange(ctx, info.Shard, info.FirstTick)
		if err != nil {
			return nil, fmt.Errorf("lineage: load index: %w", err)
		}
		r := new(Range)
		if err := DecodeRange(b, r); err != nil {
			return nil, fmt.Errorf("lineage: load index: range %d/%d: %w", info.Shard, info.FirstTick, err)
		}
		if r.Shard != info.Shard || r.FirstTick != info.FirstTick {
			return nil, fmt.Errorf("lineage: load index: %w: range stored as %d/%d holds %d/%d",
				ErrCorrupt, info.Shard, info.FirstTick, r.Shard, r.FirstTick)
		}
		ranges = append(ranges, r)
	}
	names, err := KindNames(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("lineage: load index: %w", err)
	}
	horizon, err := Horizon(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("lineage: load index: %w", err)
	}
	ix, err := BuildIndex(ranges, names, horizon)
	if err != nil {
		return nil, err
	}
	for i := range ix.ranges {
		r := &ix.ranges[i]
		k, ok := slices.BinarySearchFunc(infos, *r, func(a, b RangeInfo) int {
			return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.FirstTick, b.FirstTick))
		})
		if ok {
			r.Bytes = infos[k].Bytes
		}
	}
	return ix, nil
}

// BuildIndex indexes ranges (which it does not keep). Where two ranges of
// a shard overlap, the one starting later wins for the ticks they share (a
// shard re-recorded after a restart). names are kind names; horizon is the
// tick before which history was trimmed.
func BuildIndex(ranges []*Range, names map[uint8]string, horizon uint64) (*Index, error) {
	ix := &Index{names: names, horizon: horizon}
	if ix.names == nil {
		ix.names = map[uint8]string{}
	}
	rs := slices.Clone(ranges)
	slices.SortStableFunc(rs, func(a, b *Range) int {
		if c := cmp.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return cmp.Compare(a.FirstTick, b.FirstTick)
	})
	// ticks[i] is how many of rs[i]'s ticks are used.
	ticks := make([]int, len(rs))
	lastTick := uint64(0)
	for i, r := range rs {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("lineage: index shard %d ticks from %d: %w", r.Shard, r.FirstTick, err)
		}
		ticks[i] = r.Ticks()
		if i+1 < len(rs) && rs[i+1].Shard == r.Shard && ticks[i] > 0 && r.LastTick() >= rs[i+1].FirstTick {
			ticks[i] = int(rs[i+1].FirstTick - r.FirstTick)
		}
		if ticks[i] == 0 {
			continue
		}
		if len(ix.shards) == 0 || ix.shards[len(ix.shards)-1] != r.Shard {
			ix.shards = append(ix.shards, r.Shard)
		}
		if len(ix.ranges) == 0 || r.FirstTick < ix.base {
			ix.base = r.FirstTick
		}
		lastTick = max(lastTick, r.FirstTick+uint64(ticks[i])-1)
		ix.ranges = append(ix.ranges, RangeInfo{Shard: r.Shard, FirstTick: r.FirstTick,
			LastTick: r.FirstTick + uint64(ticks[i]) - 1, Inputs: len(r.Inputs), Events: len(r.Events)})
	}
	if len(ix.shards) > maxIndexShrd {
		return nil, fmt.Errorf("lineage: index: %d shards (max %d)", len(ix.shards), maxIndexShrd)
	}
	if lastTick-ix.base >= math.MaxUint32 {
		return nil, fmt.Errorf("lineage: index: ticks %d..%d span more than 2^32", ix.base, lastTick)
	}
	shardIdx := func(s ShardID) int {
		i, _ := slices.BinarySearch(ix.shards, s)
		return i
	}

	// Entities: every event's entity and every derivation's source.
	var all []EntityID
	for i, r := range rs {
		for _, ev := range r.Events[:eventsIn(r, ticks[i])] {
			all = append(all, ev.Entity)
			if ev.Kind == EventDerived {
				all = append(all, EntityID(ev.Arg))
			}
		}
	}
	slices.Sort(all)
	ix.ents = slices.Compact(all)
	all = nil
	if len(ix.ents) >= math.MaxUint32 {
		return nil, fmt.Errorf("lineage: index: %d entities", len(ix.ents))
	}
	entIdx := func(e EntityID) uint32 {
		i, _ := slices.BinarySearch(ix.ents, e)
		return uint32(i)
	}

	// Count, then place (a counting sort by entity and by source).
	cmdCounts := make([]uint32, len(ix.ents)+1)
	drvCounts := make([]uint32, len(ix.ents)+1)
	outCounts := make([]uint32, len(ix.ents)+1)
	var nCmds, nDrvs uint64
	for i, r := range rs {
		for _, ev := range r.Events[:eventsIn(r, ticks[i])] {
			if ev.Kind == EventCommand {
				cmdCounts[entIdx(ev.Entity)+1]++
				nCmds++
				continue
			}
			drvCounts[entIdx(ev.Entity)+1]++
			outCounts[entIdx(EntityID(ev.Arg))+1]++
			nDrvs++
		}
	}
	if nCmds+nDrvs >= math.MaxUint32 {
		return nil, fmt.Errorf("lineage: index: %d events", nCmds+nDrvs)
	}
	for i := 1; i < len(cmdCounts); i++ {
		cmdCounts[i] += cmdCounts[i-1]
		drvCounts[i] += drvCounts[i-1]
		outCounts[i] += outCounts[i-1]
	}
	ix.offs = make([]entOffs, len(ix.ents)+1)
	for i := range ix.offs {
		ix.offs[i] = entOffs{cmd: cmdCounts[i], drv: drvCounts[i]}
	}
	ix.outOffs = outCounts
	ix.cmdEvs = make([]ixEvent, nCmds)
	ix.drvEvs = make([]ixEvent, nDrvs)
	ix.outs = make([]ixEvent, nDrvs)
	ix.cmds = make([]ixCommand, 0, nCmds)
	cmdFill := cmdCounts[:len(ix.ents)]
	drvFill := drvCounts[:len(ix.ents)]
	outFill := slices.Clone(ix.outOffs[:len(ix.ents)])
	for i, r := range rs {
		shard := shardIdx(r.Shard)
		for t := 0; t < ticks[i]; t++ {
			tick := r.FirstTick + uint64(t)
			evs := r.TickEvents(t)
			if len(evs) > maxIndexSeq {
				return nil, fmt.Errorf("lineage: index: shard %d tick %d has %d events (max %d)", r.Shard, tick, len(evs), maxIndexSeq)
			}
			for seq, ev := range evs {
				e := entIdx(ev.Entity)
				if ev.Kind == EventCommand {
					w := ix.when(tick, shard, seq, false)
					ix.cmdEvs[cmdFill[e]] = ixEvent{arg: ev.Arg, when: w}
					cmdFill[e]++
					ix.cmds = append(ix.cmds, ixCommand{pos: ev.Arg, when: w, entity: e})
					continue
				}
				w := ix.when(tick, shard, seq, true)
				src := entIdx(EntityID(ev.Arg))
				ix.drvEvs[drvFill[e]] = ixEvent{arg: uint64(src), when: w}
				drvFill[e]++
				ix.outs[outFill[src]] = ixEvent{arg: uint64(e), when: w}
				outFill[src]++
			}
		}
	}
	// Ranges were visited shard by shard: put each group in time order.
	byWhen := func(a, b ixEvent) int { return cmp.Compare(a.when, b.when) }
	for i := range ix.ents {
		for _, g := range [][]ixEvent{ix.cmdsOf(uint32(i)), ix.drvsOf(uint32(i)), ix.outs[ix.outOffs[i]:ix.outOffs[i+1]]} {
			if !slices.IsSortedFunc(g, byWhen) {
				slices.SortFunc(g, byWhen)
			}
		}
	}
	slices.SortFunc(ix.cmds, func(a, b ixCommand) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.when, b.when)
	})

	// Inputs: one CommandInfo per position, and each shard's per tick.
	for i, r := range rs {
		if ticks[i] == 0 {
			continue
		}
		n := r.InputEnds[ticks[i]-1]
		f := ixFrame{shard: r.Shard, firstTick: r.FirstTick, ends: make([]uint32, ticks[i]), pos: make([]uint64, n)}
		for t := range f.ends {
			f.ends[t] = uint32(r.InputEnds[t])
		}
		for k, in := range r.Inputs[:n] {
			f.pos[k] = in.Pos
		}
		ix.frames = append(ix.frames, f)
		ix.infos = append(ix.infos, r.Inputs[:n]...)
	}
	slices.SortStableFunc(ix.infos, func(a, b CommandInfo) int { return cmp.Compare(a.Pos, b.Pos) })
	ix.infos = slices.CompactFunc(ix.infos, func(a, b CommandInfo) bool { return a.Pos == b.Pos })
	return ix, nil
}

// eventsIn returns how many of r's events belong to its first ticks ticks.
func eventsIn(r *Range, ticks int) int {
	if ticks == 0 {
		return 0
	}
	return r.EventEnds[ticks-1]
}

// entity returns e's dense index.
func (ix *Index) entity(e EntityID) (uint32, bool) {
	i, ok := slices.BinarySearch(ix.ents, e)
	return uint32(i), ok
}

// Command returns what the index knows of the record at log position
// pos: who sent it, its kind and the tick it was input to.
func (ix *Index) Command(pos uint64) (CommandInfo, bool) { return ix.info(pos) }

// info returns what the index knows of the command at pos. Positions are
// nearly dense, so it looks where pos would be if they were before
// searching.
func (ix *Index) info(pos uint64) (CommandInfo, bool) {
	in := ix.infos
	if len(in) == 0 {
		return CommandInfo{Pos: pos}, false
	}
	if pos >= in[0].Pos && pos-in[0].Pos < uint64(len(in)) {
		if g := in[pos-in[0].Pos]; g.Pos == pos {
			return g, true
		}
	}
	i, ok := slices.BinarySearchFunc(in, pos, func(c CommandInfo, p uint64) int { return cmp.Compare(c.Pos, p) })
	if !ok {
		return CommandInfo{Pos: pos}, false
	}
	return in[i], true
}
