package lineage

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// AnyShard, as the shard of a Why query, means "whichever shard the entity
// was in".
const AnyShard ShardID = 1<<32 - 1

// Unlimited, as a depth limit, follows derivations without limit.
const Unlimited = -1

// ErrUnknownEntity is returned by Why for an entity with no recorded
// lineage up to the tick asked about; ErrUnknownShard for a shard the index
// holds nothing of; ErrUnknownCommand by Affected for a position no entity
// was affected by.
var (
	ErrUnknownEntity  = errors.New("lineage: no lineage recorded for entity")
	ErrUnknownShard   = errors.New("lineage: no lineage recorded for shard")
	ErrUnknownCommand = errors.New("lineage: command affected no entity")
)

// Link is one derivation a Why answer followed: entity Chain[Parent] was
// derived from Entity at Tick in Shard, so Entity's history before that
// was followed (the root, Parent -1, is the entity asked about). There is
// one link per derivation followed; a command is reported with the first
// link (the fewest derivations) that reached it.
type Link struct {
	Entity EntityID
	// Tick is the tick of the derivation (for the root: the tick asked
	// about); the history followed is the entity's events before it.
	Tick  uint64
	Shard ShardID
	// Depth counts derivations between this entity and the one asked
	// about.
	Depth  int
	Parent int
}

// Cause is a command found by Why.
type Cause struct {
	// CommandInfo says which record it was (Pos), who sent it (Player,
	// 0 for engine records such as migrations), the tick it was input to
	// and its kind. Known is false when the input was not recorded
	// (trimmed).
	CommandInfo
	Known    bool
	KindName string
	// Entity is the entity the command was applied to, at tick Applied
	// in Shard (Applied can be later than Tick: a ship in transit between
	// sectors is credited with its orders when it arrives).
	Entity  EntityID
	Applied uint64
	Shard   ShardID
	// Depth counts derivations between Entity and the entity asked about;
	// Link is the index in Chain() of the link that found the command.
	Depth int
	Link  int
}

// WhyResult answers Why. The commands are held as history prefixes, one
// per entity and derivation followed ("entity X's commands before tick
// t"), which is what makes Why cheap whatever the size of the answer; list
// them with Causes or AllCauses.
type WhyResult struct {
	Shard      ShardID
	Entity     EntityID
	Tick       uint64
	DepthLimit int
	// Applications counts the command applications in the answer: an
	// upper bound on the number of distinct commands (a position applied
	// to several entities counts once per entity).
	Applications int
	// Truncated reports that the depth limit stopped a derivation from
	// being followed: with a larger limit there may be more causes.
	Truncated bool
	// Horizon is the tick before which history was trimmed (0: none).
	Horizon uint64

	ix       *Index
	segments []whySegment
	items    []walkItem // the derivations followed, breadth first
	chain    []Link     // built from items on demand
}

// Chain lists the derivations the walk followed, breadth first; Chain()[0]
// is the entity asked about. It is built on the first call.
func (r *WhyResult) Chain() []Link {
	if r.chain != nil || len(r.items) == 0 {
		return r.chain
	}
	ix := r.ix
	r.chain = make([]Link, len(r.items))
	for i, it := range r.items {
		l := Link{Entity: ix.ents[it.ent], Depth: int(it.depth), Parent: int(it.parent), Tick: r.Tick, Shard: r.Shard}
		if i > 0 {
			l.Tick, l.Shard = ix.tickOf(it.when), ix.shardOf(it.when)
		}
		r.chain[i] = l
	}
	return r.chain
}

// whySegment is part of an entity's commands in the answer: those with
// "when" in [from, to), found at depth through chain link link.
type whySegment struct {
	ent      uint32
	from, to uint64
	depth    int32
	link     int32
}

// Causes returns up to limit distinct commands of the answer (0: all),
// nearest first: by derivations from the entity asked about, then in the
// order the walk reached them, most recent first within an entity's
// history.
func (r *WhyResult) Causes(limit int) []Cause {
	var out []Cause
	seen := map[uint64]struct{}{}
	ix := r.ix
	for _, sg := range r.segments {
		g := ix.cmdsOf(sg.ent)
		lo := sort.Search(len(g), func(k int) bool { return g[k].when >= sg.from })
		hi := lo + sort.Search(len(g)-lo, func(k int) bool { return g[lo+k].when >= sg.to })
		for k := hi - 1; k >= lo; k-- {
			ev := g[k]
			if _, dup := seen[ev.arg]; dup {
				continue
			}
			if limit > 0 && len(out) == limit {
				return out
			}
			seen[ev.arg] = struct{}{}
			info, known := ix.info(ev.arg)
			out = append(out, Cause{CommandInfo: info, Known: known, KindName: ix.KindName(info.Kind), Entity: ix.ents[sg.ent],
				Applied: ix.tickOf(ev.when), Shard: ix.shardOf(ev.when), Depth: int(sg.depth), Link: int(sg.link)})
		}
	}
	return out
}

// AllCauses returns every distinct command of the answer, by position.
func (r *WhyResult) AllCauses() []Cause {
	out := r.Causes(0)
	slices.SortFunc(out, func(a, b Cause) int { return cmp.Compare(a.Pos, b.Pos) })
	return out
}

// Path returns the chain from c's entity to the entity asked about: the
// link that found c first, the entity asked about last.
func (r *WhyResult) Path(c Cause) []Link {
	chain := r.Chain()
	var p []Link
	for i := c.Link; i >= 0 && i < len(chain) && len(p) <= len(chain); i = chain[i].Parent {
		p = append(p, chain[i])
	}
	return p
}

// walkScratch is per-query state indexed by dense entity index, reused
// across queries (a generation number marks what this query set).
type walkScratch struct {
	gen      uint32
	state    []entState
	items    []walkItem
	segments []whySegment
	heap     whenHeap
}

// entState is one entity's state in a walk, in one cache line's worth.
type entState struct {
	// bound is, for Why, the "when" before which the entity's history
	// was followed; for Affected, the "when" it is influenced from.
	bound uint64
	gen   uint32 // == walkScratch.gen: this query's
	// Why: how far the entity's commands and derivations were followed
	// (absolute offsets in cmdEvs and drvEvs).
	cmdAt, drvAt uint32
}

// walkItem is a derivation Why follows (the root: the entity asked about).
type walkItem struct {
	when   uint64 // of the derivation; the source's history before it is followed
	ent    uint32
	parent int32
	depth  int32
}

func (ix *Index) getScratch() *walkScratch {
	ix.scratchMu.Lock()
	var ws *walkScratch
	if n := len(ix.scratchFree); n > 0 {
		ws = ix.scratchFree[n-1]
		ix.scratchFree = ix.scratchFree[:n-1]
	}
	ix.scratchMu.Unlock()
	if ws == nil {
		ws = &walkScratch{state: make([]entState, len(ix.ents))}
	}
	ws.gen++
	if ws.gen == 0 { // wrapped: forget every mark
		clear(ws.state)
		ws.gen = 1
	}
	return ws
}

// putScratch keeps ws for the next query (a few, for concurrent ones).
func (ix *Index) putScratch(ws *walkScratch) {
	ix.scratchMu.Lock()
	if len(ix.scratchFree) < 4 {
		ix.scratchFree = append(ix.scratchFree, ws)
	}
	ix.scratchMu.Unlock()
}

// Why answers which commands, and which chain of entities, entity e's
// state at the end of tick was derived from: e's own commands up to tick,
// and transitively, for every derivation of e from another entity at some
// tick t, that entity's commands and derivations before t (earlier ticks,
// and earlier events of the same tick in the same shard), following
// migrations across shards. depthLimit bounds the derivations followed
// (0: e's own commands only; Unlimited: all).
//
// The answer is an over-approximation of the commands whose data flowed
// into e (an entity's state is taken to depend on its whole history). It
// is exactly as complete as the sim's reports: a dependency the sim does
// not report (shared random streams, iteration order, an event that did
// not happen because of another entity) is not in it.
//
// The walk follows derivations only, breadth first, each entity's history
// once (a later derivation from an entity extends the part already
// followed); its cost is in the derivations it follows.
//
// shard names the frame asked about (AnyShard: any); because entity ids
// are stable across shards, the walk crosses them either way.
func (ix *Index) Why(shard ShardID, e EntityID, tick uint64, depthLimit int) (*WhyResult, error) {
	res := &WhyResult{Shard: shard, Entity: e, Tick: tick, DepthLimit: depthLimit, Horizon: ix.horizon, ix: ix}
	if shard != AnyShard {
		if _, ok := slices.BinarySearch(ix.shards, shard); !ok {
			return res, fmt.Errorf("%w: %d", ErrUnknownShard, shard)
		}
	}
	end := ix.tickEnd(tick)
	root, ok := ix.entity(e)
	if !ok || !ix.hasEventBefore(root, end) {
		return res, fmt.Errorf("%w: %#x up to tick %d", ErrUnknownEntity, uint64(e), tick)
	}
	ws := ix.getScratch()
	defer ix.putScratch(ws)
	items := append(ws.items[:0], walkItem{when: end, ent: root, parent: -1})
	segs := ws.segments[:0]
	for qi := 0; qi < len(items); qi++ {
		it := items[qi]
		e := it.ent
		st := &ws.state[e]
		if st.gen == ws.gen && it.when <= st.bound {
			continue // this part of the history was already followed
		}
		lo, hi := ix.offs[e], ix.offs[e+1]
		from, cmdAt, drvAt := uint64(0), lo.cmd, lo.drv
		if st.gen == ws.gen {
			from, cmdAt, drvAt = st.bound, st.cmdAt, st.drvAt
		}
		cmdTo := gallop(ix.cmdEvs, cmdAt, hi.cmd, it.when)
		drvTo := gallop(ix.drvEvs, drvAt, hi.drv, it.when)
		*st = entState{bound: it.when, gen: ws.gen, cmdAt: cmdTo, drvAt: drvTo}
		segs = append(segs, whySegment{ent: e, from: from, to: it.when, depth: it.depth, link: int32(qi)})
		res.Applications += int(cmdTo - cmdAt)
		if drvTo == drvAt {
			continue
		}
		if depthLimit >= 0 && int(it.depth) >= depthLimit {
			res.Truncated = true
			continue
		}
		for _, ev := range ix.drvEvs[drvAt:drvTo] {
			src := uint32(ev.arg)
			if s := &ws.state[src]; s.gen == ws.gen && ev.when <= s.bound {
				continue // its history up to then is already followed
			}
			items = append(items, walkItem{when: ev.when, ent: src, parent: int32(qi), depth: it.depth + 1})
		}
	}
	ws.segments = segs
	res.segments = slices.Clone(segs)
	ws.items = items
	res.items = slices.Clone(items)
	return res, nil
}

// gallop returns the first index in [lo, hi) of evs whose "when" is at
// least w (hi if none). An entity's events are spread fairly evenly over
// time, so it starts from an interpolated guess and gallops from there: a
// few probes into a long history instead of a binary search's many cache
// misses.
func gallop(evs []ixEvent, lo, hi uint32, w uint64) uint32 {
	if lo >= hi || evs[lo].when >= w {
		return lo
	}
	if evs[hi-1].when < w {
		return hi
	}
	// Now evs[lo].when < w <= evs[hi-1].when.
	if hi-lo > 16 {
		a, b := evs[lo].when, evs[hi-1].when
		g := lo + uint32(float64(hi-1-lo)*(float64(w-a)/float64(b-a)))
		g = min(max(g, lo+1), hi-2)
		step := uint32(1)
		if evs[g].when < w {
			// Forward: the answer is after g.
			lo = g + 1
			for lo+step < hi && evs[lo+step-1].when < w {
				lo += step
				step *= 2
			}
			hi = min(hi, lo+step)
		} else {
			// Backward: the answer is at or before g.
			hi = g + 1
			for hi > lo+step && evs[hi-step-1].when >= w {
				hi -= step
				step *= 2
			}
			lo = max(lo, hi-min(hi-lo, step))
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if evs[mid].when < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// whenIndex returns the number of events of g before "when" w.
func whenIndex(g []ixEvent, w uint64) int {
	return sort.Search(len(g), func(k int) bool { return g[k].when >= w })
}

// hasEventBefore reports whether entity ent has any event before w.
func (ix *Index) hasEventBefore(ent uint32, w uint64) bool {
	c, d := ix.cmdsOf(ent), ix.drvsOf(ent)
	return (len(c) > 0 && c[0].when < w) || (len(d) > 0 && d[0].when < w)
}

// Influence is one entity a command influenced.
type Influence struct {
	Entity EntityID
	// Since is the first tick at whose end the entity's state depended on
	// the command (it does at every later tick); Shard is where.
	Since uint64
	Shard ShardID
	// From is the entity it was derived from then (0 if the command was
	// applied to it directly); Depth counts derivations from the command.
	From  EntityID
	Depth int
	// LastEvent is the tick of the entity's last recorded event up to the
	// limit: an entity that vanished (a cannonball that fell) stops there.
	LastEvent uint64
}

// AffectedResult answers Affected.
type AffectedResult struct {
	Command  CommandInfo
	Known    bool
	KindName string
	// Through is the last tick followed.
	Through uint64
	// Entities are by Since, then entity.
	Entities []Influence
}

// Affected answers which entities the command at log position pos
// influenced, transitively, through the end of tick through (0: to the
// end of the recorded history): the entities it was applied to, from the
// tick it was, then every entity derived from an influenced entity after
// it was influenced, and so on. Each entity is influenced at every tick
// from its Since on. It is the converse of Why with no depth limit: the
// state of e at tick t is influenced by pos exactly when pos is among
// Why(e, t)'s causes.
func (ix *Index) Affected(pos uint64, through uint64) (*AffectedResult, error) {
	info, known := ix.info(pos)
	res := &AffectedResult{Command: info, Known: known, KindName: ix.KindName(info.Kind), Through: through}
	limit := ix.tickEnd(through)
	if through == 0 {
		limit = ^uint64(0)
		res.Through = ix.Stats().LastTick
	}
	i, _ := slices.BinarySearchFunc(ix.cmds, pos, func(c ixCommand, p uint64) int { return cmp.Compare(c.pos, p) })
	// since[ent] (scratch bound) is the earliest "when" ent is influenced
	// from; from and depth say how, for the entities reached.
	type how struct {
		ent, from uint32 // from: dense index + 1; 0: the command itself
		depth     int
	}
	ws := ix.getScratch()
	defer ix.putScratch(ws)
	since := func(ent uint32) (uint64, bool) {
		if st := &ws.state[ent]; st.gen == ws.gen {
			return st.bound, true
		}
		return 0, false
	}
	mark := func(ent uint32, w uint64) { ws.state[ent] = entState{bound: w, gen: ws.gen} }
	hows := map[uint32]how{}
	h := &ws.heap
	*h = (*h)[:0]
	for ; i < len(ix.cmds) && ix.cmds[i].pos == pos; i++ {
		c := ix.cmds[i]
		if c.when >= limit {
			break
		}
		if s, ok := since(c.entity); !ok || c.when < s {
			mark(c.entity, c.when)
			hows[c.entity] = how{ent: c.entity}
			heap.Push(h, whenItem{when: c.when, ent: c.entity})
		}
	}
	if len(hows) == 0 {
		return res, fmt.Errorf("%w: position %d", ErrUnknownCommand, pos)
	}
	for h.Len() > 0 {
		it := heap.Pop(h).(whenItem)
		if s, _ := since(it.ent); it.when != s {
			continue // a stale entry: reached earlier since
		}
		d := hows[it.ent].depth
		g := ix.outs[ix.outOffs[it.ent]:ix.outOffs[it.ent+1]]
		k := sort.Search(len(g), func(k int) bool { return g[k].when > it.when })
		for _, ev := range g[k:] {
			if ev.when >= limit {
				break
			}
			to := uint32(ev.arg)
			if s, ok := since(to); ok && s <= ev.when {
				continue
			}
			mark(to, ev.when)
			hows[to] = how{ent: to, from: it.ent + 1, depth: d + 1}
			heap.Push(h, whenItem{when: ev.when, ent: to})
		}
	}
	for ent, hw := range hows {
		w, _ := since(ent)
		inf := Influence{Entity: ix.ents[ent], Since: ix.tickOf(w), Shard: ix.shardOf(w), Depth: hw.depth}
		if hw.from > 0 {
			inf.From = ix.ents[hw.from-1]
		}
		inf.LastEvent = inf.Since
		for _, g := range [][]ixEvent{ix.cmdsOf(ent), ix.drvsOf(ent)} {
			if k := whenIndex(g, limit); k > 0 {
				inf.LastEvent = max(inf.LastEvent, ix.tickOf(g[k-1].when))
			}
		}
		res.Entities = append(res.Entities, inf)
	}
	slices.SortFunc(res.Entities, func(a, b Influence) int {
		if c := cmp.Compare(a.Since, b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Entity, b.Entity)
	})
	return res, nil
}

type whenItem struct {
	when uint64
	ent  uint32
}

type whenHeap []whenItem

func (h whenHeap) Len() int           { return len(h) }
func (h whenHeap) Less(i, j int) bool { return h[i].when < h[j].when }
func (h whenHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *whenHeap) Push(x any)        { *h = append(*h, x.(whenItem)) }
func (h *whenHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// FrameInput is a record input to a tick of a shard.
type FrameInput struct {
	CommandInfo
	Known    bool
	KindName string
	// Applied are the entities the shard applied it to in that tick.
	Applied []EntityID
}

// FrameShard is one shard's input to a tick.
type FrameShard struct {
	Shard  ShardID
	Inputs []FrameInput
}

// FrameResult answers Frame.
type FrameResult struct {
	Tick   uint64
	Shards []FrameShard
}

// Frame returns every record that was input to tick, per shard, in log
// order, with the entities each was applied to. Shards with no recorded
// lineage for the tick are absent.
func (ix *Index) Frame(tick uint64) (*FrameResult, error) {
	res := &FrameResult{Tick: tick}
	for _, f := range ix.frames {
		if tick < f.firstTick || tick-f.firstTick >= uint64(len(f.ends)) {
			continue
		}
		t := int(tick - f.firstTick)
		lo := uint32(0)
		if t > 0 {
			lo = f.ends[t-1]
		}
		fs := FrameShard{Shard: f.shard}
		si, _ := slices.BinarySearch(ix.shards, f.shard)
		from, to := ix.when(tick, si, 0, false), ix.when(tick, si, maxIndexSeq, true)
		for _, pos := range f.pos[lo:f.ends[t]] {
			info, known := ix.info(pos)
			in := FrameInput{CommandInfo: info, Known: known, KindName: ix.KindName(info.Kind)}
			in.Tick = tick
			i, _ := slices.BinarySearchFunc(ix.cmds, pos, func(c ixCommand, p uint64) int { return cmp.Compare(c.pos, p) })
			for ; i < len(ix.cmds) && ix.cmds[i].pos == pos; i++ {
				if w := ix.cmds[i].when; w >= from && w <= to {
					in.Applied = append(in.Applied, ix.ents[ix.cmds[i].entity])
				}
			}
			fs.Inputs = append(fs.Inputs, in)
		}
		res.Shards = append(res.Shards, fs)
	}
	return res, nil
}
