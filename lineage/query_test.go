package lineage

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// Entities of the hand-built history.
const (
	s1 EntityID = 1<<56 | 1 // player 1's ship
	s2 EntityID = 1<<56 | 2 // player 2's ship
	b1 EntityID = 2<<56 | 1 // cannonballs
	b2 EntityID = 2<<56 | 2
	b3 EntityID = 2<<56 | 3
	b9 EntityID = 2<<56 | 9
)

// handHistory records, with a Log, a small battle over two shards:
//
//	tick 1, shard 0: joins (pos 1, 2)
//	tick 2, shard 0: s1 fires (pos 3): b1, b2 from s1
//	tick 3, shard 0: s2 steers (pos 4); b1 hits s2
//	tick 4, shard 1: s1 arrives (migration, pos 5)
//	tick 5, shard 1: s1's throttle (pos 6); s1 fires b3
//	tick 6, shard 0: b3 arrives (migration, pos 7) and hits s2
//	tick 7, shard 0: s2 fires b9, then its order pos 8 is applied
func handHistory(t *testing.T) *Index {
	t.Helper()
	ctx := context.Background()
	l := NewLog(LogOptions{RangeTicks: 4})
	if err := PutKindNames(ctx, l.Store(), map[uint8]string{0: "migration", 1: "join", 2: "rudder", 3: "throttle", 4: "fire"}); err != nil {
		t.Fatal(err)
	}
	type step struct {
		shard  ShardID
		tick   uint64
		inputs []CommandInfo
		do     func()
	}
	steps := []step{
		{0, 1, []CommandInfo{{Pos: 1, Player: 1, Kind: 1}, {Pos: 2, Player: 2, Kind: 1}}, func() { l.Command(s1, 1); l.Command(s2, 2) }},
		{1, 1, []CommandInfo{{Pos: 1, Player: 1, Kind: 1}, {Pos: 2, Player: 2, Kind: 1}}, func() {}},
		{0, 2, []CommandInfo{{Pos: 3, Player: 1, Kind: 4}}, func() { l.Command(s1, 3); l.Derived(b1, s1); l.Derived(b2, s1) }},
		{0, 3, []CommandInfo{{Pos: 4, Player: 2, Kind: 2}}, func() { l.Command(s2, 4); l.Derived(s2, b1) }},
		{1, 4, []CommandInfo{{Pos: 5, Kind: 0}}, func() { l.Command(s1, 5) }},
		{1, 5, []CommandInfo{{Pos: 6, Player: 1, Kind: 3}}, func() { l.Command(s1, 6); l.Derived(b3, s1) }},
		{0, 6, []CommandInfo{{Pos: 7, Kind: 0}}, func() { l.Command(b3, 7); l.Derived(s2, b3) }},
		{0, 7, []CommandInfo{{Pos: 8, Player: 2, Kind: 4}}, func() { l.Derived(b9, s2); l.Command(s2, 8) }},
	}
	for _, s := range steps {
		if err := l.BeginTick(ctx, s.shard, s.tick); err != nil {
			t.Fatal(err)
		}
		for _, in := range s.inputs {
			l.Input(in)
		}
		s.do()
		if err := l.EndTick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ix, err := LoadIndex(ctx, l.Store())
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func causePositions(r *WhyResult) []uint64 {
	var out []uint64
	for _, c := range r.AllCauses() {
		out = append(out, c.Pos)
	}
	return out
}

func TestWhyOnHandBuiltHistory(t *testing.T) {
	ix := handHistory(t)
	for _, tc := range []struct {
		name      string
		e         EntityID
		tick      uint64
		depth     int
		want      []uint64
		truncated bool
	}{
		{"own commands only", s2, 3, 0, []uint64{2, 4}, true},
		{"before the hit", s2, 2, Unlimited, []uint64{2}, false},
		{"through the ball to the shooter", s2, 3, Unlimited, []uint64{1, 2, 3, 4}, false},
		{"depth 1 stops at the ball", s2, 3, 1, []uint64{2, 4}, true},
		{"depth 2 reaches the shooter", s2, 3, 2, []uint64{1, 2, 3, 4}, false},
		{"across shards and migrations", s2, 6, Unlimited, []uint64{1, 2, 3, 4, 5, 6, 7}, false},
		{"a ball inherits its shooter's history", b3, 6, Unlimited, []uint64{1, 3, 5, 6, 7}, false},
		{"not what came later in the same tick", b9, 7, Unlimited, []uint64{1, 2, 3, 4, 5, 6, 7}, false},
		{"the migrated ship", s1, 5, Unlimited, []uint64{1, 3, 5, 6}, false},
	} {
		r, err := ix.Why(AnyShard, tc.e, tc.tick, tc.depth)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := causePositions(r); !slices.Equal(got, tc.want) || r.Truncated != tc.truncated {
			t.Errorf("%s: causes %v truncated %v, want %v %v", tc.name, got, r.Truncated, tc.want, tc.truncated)
		}
	}
	// The answer names players, kinds, where and when each command was
	// applied, and the chain that leads back to it.
	r, _ := ix.Why(0, s2, 6, Unlimited)
	var fire Cause
	for _, c := range r.AllCauses() {
		if c.Pos == 3 {
			fire = c
		}
	}
	if !fire.Known || fire.Player != 1 || fire.KindName != "fire" || fire.Tick != 2 || fire.Entity != s1 || fire.Applied != 2 || fire.Shard != 0 || fire.Depth != 2 {
		t.Fatalf("fire cause %+v", fire)
	}
	path := r.Path(fire)
	if len(path) != 3 || path[0].Entity != s1 || path[1].Entity != b1 || path[1].Tick != 3 || path[2].Entity != s2 || path[2].Parent != -1 {
		t.Fatalf("path %+v", path)
	}
	var throttle Cause
	for _, c := range r.AllCauses() {
		if c.Pos == 6 {
			throttle = c
		}
	}
	if throttle.Shard != 1 || throttle.Applied != 5 || throttle.KindName != "throttle" {
		t.Fatalf("throttle cause %+v", throttle)
	}

	if _, err := ix.Why(AnyShard, 99, 7, Unlimited); !errors.Is(err, ErrUnknownEntity) {
		t.Fatalf("unknown entity: %v", err)
	}
	if _, err := ix.Why(AnyShard, b3, 4, Unlimited); !errors.Is(err, ErrUnknownEntity) {
		t.Fatalf("entity before its first event: %v", err)
	}
	if _, err := ix.Why(5, s1, 7, Unlimited); !errors.Is(err, ErrUnknownShard) {
		t.Fatalf("unknown shard: %v", err)
	}
}

func TestAffectedOnHandBuiltHistory(t *testing.T) {
	ix := handHistory(t)
	type since struct {
		e     EntityID
		since uint64
	}
	for _, tc := range []struct {
		pos  uint64
		thru uint64
		want []since
	}{
		{3, 0, []since{{s1, 2}, {b1, 2}, {b2, 2}, {s2, 3}, {b3, 5}, {b9, 7}}},
		{3, 4, []since{{s1, 2}, {b1, 2}, {b2, 2}, {s2, 3}}},
		{4, 0, []since{{s2, 3}, {b9, 7}}},
		{6, 0, []since{{s1, 5}, {b3, 5}, {s2, 6}, {b9, 7}}},
		{8, 0, []since{{s2, 7}}}, // b9 was fired before the order
	} {
		r, err := ix.Affected(tc.pos, tc.thru)
		if err != nil {
			t.Fatalf("affected %d: %v", tc.pos, err)
		}
		var got []since
		for _, in := range r.Entities {
			got = append(got, since{in.Entity, in.Since})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("affected %d through %d: %x, want %x", tc.pos, tc.thru, got, tc.want)
		}
	}
	r, _ := ix.Affected(3, 0)
	if r.Command.Player != 1 || r.KindName != "fire" || r.Through != 7 {
		t.Fatalf("affected header %+v", r)
	}
	for _, in := range r.Entities {
		if in.Entity == s2 && (in.From != b1 || in.Depth != 2 || in.LastEvent != 7 || in.Shard != 0) {
			t.Fatalf("s2 influence %+v", in)
		}
	}
	if _, err := ix.Affected(100, 0); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("unknown position: %v", err)
	}
}

func TestFrameOnHandBuiltHistory(t *testing.T) {
	ix := handHistory(t)
	f, err := ix.Frame(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Shards) != 2 || len(f.Shards[0].Inputs) != 2 || len(f.Shards[1].Inputs) != 2 {
		t.Fatalf("frame 1: %+v", f)
	}
	if in := f.Shards[0].Inputs[1]; in.Pos != 2 || in.Player != 2 || in.KindName != "join" || !slices.Equal(in.Applied, []EntityID{s2}) {
		t.Fatalf("frame 1 shard 0: %+v", in)
	}
	if in := f.Shards[1].Inputs[1]; len(in.Applied) != 0 {
		t.Fatalf("shard 1 applied nothing at tick 1: %+v", in)
	}
	f, _ = ix.Frame(4) // shard 0 did not step at tick 4
	if len(f.Shards) != 1 || f.Shards[0].Shard != 1 || f.Shards[0].Inputs[0].Pos != 5 || f.Shards[0].Inputs[0].KindName != "migration" {
		t.Fatalf("frame 4: %+v", f)
	}
	if f, _ := ix.Frame(50); len(f.Shards) != 0 {
		t.Fatalf("frame past the end: %+v", f)
	}
}

// naiveInfluence computes, by one forward pass over every event in time
// order (tick, shard, order in the tick), for each entity the number of
// derivations on the shortest chain from the command at pos, as of the end
// of each tick: the definition Why and Affected implement with indexes.
func naiveInfluence(ranges []*Range, pos uint64) map[EntityID][]struct{ tick, depth uint64 } {
	type ev struct {
		tick  uint64
		shard ShardID
		seq   int
		e     Event
	}
	var all []ev
	for _, r := range ranges {
		for i := 0; i < r.Ticks(); i++ {
			for seq, e := range r.TickEvents(i) {
				all = append(all, ev{r.FirstTick + uint64(i), r.Shard, seq, e})
			}
		}
	}
	slices.SortFunc(all, func(a, b ev) int {
		if c := cmp.Compare(a.tick, b.tick); c != 0 {
			return c
		}
		if c := cmp.Compare(a.shard, b.shard); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	dist := map[EntityID]uint64{}
	hist := map[EntityID][]struct{ tick, depth uint64 }{}
	for _, x := range all {
		d, ok := uint64(0), false
		switch {
		case x.e.Kind == EventCommand && x.e.Arg == pos:
			ok = true
		case x.e.Kind == EventDerived:
			if s, in := dist[EntityID(x.e.Arg)]; in {
				d, ok = s+1, true
			}
		}
		if !ok {
			continue
		}
		if old, in := dist[x.e.Entity]; !in || d < old {
			dist[x.e.Entity] = d
			hist[x.e.Entity] = append(hist[x.e.Entity], struct{ tick, depth uint64 }{x.tick, d})
		}
	}
	return hist
}

// TestQueriesMatchReference checks Why (with and without depth limits)
// and Affected against naiveInfluence on random histories over several
// shards.
func TestQueriesMatchReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := rapid.IntRange(1, 3).Draw(t, "shards")
		ticks := rapid.IntRange(1, 25).Draw(t, "ticks")
		nEnt := rapid.IntRange(1, 8).Draw(t, "entities")
		var ranges []*Range
		pos := uint64(0)
		var positions []uint64
		for s := 0; s < shards; s++ {
			ranges = append(ranges, &Range{Shard: ShardID(s * 3), FirstTick: 10})
		}
		for i := 0; i < ticks; i++ {
			tick := uint64(10 + i)
			var inputs []CommandInfo
			for n := rapid.IntRange(0, 3).Draw(t, "inputs"); n > 0; n-- {
				pos++
				inputs = append(inputs, CommandInfo{Pos: pos, Tick: tick, Player: uint32(pos % 5)})
				positions = append(positions, pos)
			}
			for _, r := range ranges {
				r.Inputs = append(r.Inputs, inputs...)
				r.InputEnds = append(r.InputEnds, len(r.Inputs))
				for n := rapid.IntRange(0, 6).Draw(t, "events"); n > 0; n-- {
					e := EntityID(rapid.IntRange(1, nEnt).Draw(t, "e"))
					if len(inputs) > 0 && rapid.IntRange(0, 2).Draw(t, "kind") == 0 {
						// Mostly this tick's inputs; sometimes an older one
						// (credited on arrival).
						p := rapid.SampledFrom(inputs).Draw(t, "input").Pos
						if rapid.IntRange(0, 4).Draw(t, "old") == 0 {
							p = rapid.SampledFrom(positions).Draw(t, "older")
						}
						r.Events = append(r.Events, CommandEvent(e, p))
					} else {
						r.Events = append(r.Events, DerivedEvent(e, EntityID(rapid.IntRange(1, nEnt).Draw(t, "from"))))
					}
				}
				r.EventEnds = append(r.EventEnds, len(r.Events))
			}
		}
		ix, err := BuildIndex(ranges, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// want[(e, tick)] = position → shortest chain length.
		type key struct {
			e    EntityID
			tick uint64
		}
		want := map[key]map[uint64]uint64{}
		for _, p := range positions {
			for e, h := range naiveInfluence(ranges, p) {
				for tick := uint64(10); tick < uint64(10+ticks); tick++ {
					d, ok := uint64(0), false
					for _, x := range h {
						if x.tick <= tick {
							d, ok = x.depth, true
						}
					}
					if ok {
						if want[key{e, tick}] == nil {
							want[key{e, tick}] = map[uint64]uint64{}
						}
						want[key{e, tick}][p] = d
					}
				}
			}
			// Affected is the converse.
			r, err := ix.Affected(p, 0)
			h := naiveInfluence(ranges, p)
			if len(h) == 0 {
				if !errors.Is(err, ErrUnknownCommand) {
					t.Fatalf("affected %d: %v, want ErrUnknownCommand", p, err)
				}
				continue
			}
			if err != nil || len(r.Entities) != len(h) {
				t.Fatalf("affected %d: %d entities (%v), want %d", p, len(r.Entities), err, len(h))
			}
			for _, in := range r.Entities {
				if hh := h[in.Entity]; len(hh) == 0 || hh[0].tick != in.Since {
					t.Fatalf("affected %d: %x since %d, want %v", p, in.Entity, in.Since, hh)
				}
			}
		}
		for e := EntityID(1); e <= EntityID(nEnt); e++ {
			for tick := uint64(10); tick < uint64(10+ticks); tick++ {
				depth := rapid.SampledFrom([]int{Unlimited, 0, 1, 2, 3}).Draw(t, "depth")
				r, err := ix.Why(AnyShard, e, tick, depth)
				if errors.Is(err, ErrUnknownEntity) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				var exp []uint64
				for p, d := range want[key{e, tick}] {
					if depth < 0 || d <= uint64(depth) {
						exp = append(exp, p)
					}
				}
				slices.Sort(exp)
				if got := causePositions(r); !slices.Equal(got, exp) {
					t.Fatalf("why(%d, %d, depth %d) = %v, want %v", e, tick, depth, got, exp)
				}
				for _, c := range r.AllCauses() {
					if uint64(c.Depth) != want[key{e, tick}][c.Pos] {
						t.Fatalf("why(%d, %d): position %d at depth %d, want %d", e, tick, c.Pos, c.Depth, want[key{e, tick}][c.Pos])
					}
				}
			}
		}
	})
}

// TestQueriesConcurrent runs queries from several goroutines on one Index
// (it shares per-query scratch between them); run with -race.
func TestQueriesConcurrent(t *testing.T) {
	ix := handHistory(t)
	want, _ := ix.Why(AnyShard, s2, 6, Unlimited)
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 200; i++ {
				r, err := ix.Why(AnyShard, s2, 6, Unlimited)
				if err == nil && !slices.Equal(causePositions(r), causePositions(want)) {
					err = errors.New("concurrent Why differs")
				}
				if err == nil {
					_, err = ix.Affected(3, 0)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestGallop checks the interpolating search against sort.Search on
// sorted "when" columns of every shape (runs of equal values, clusters,
// gaps), for every sub-range and target.
func TestGallop(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(t, "n")
		evs := make([]ixEvent, n)
		w := rapid.Uint64Range(0, 1<<40).Draw(t, "start")
		for i := range evs {
			w += rapid.SampledFrom([]uint64{0, 1, 2, 1 << 32, 1 << 20, 7}).Draw(t, "step")
			evs[i].when = w
		}
		lo := rapid.IntRange(0, n).Draw(t, "lo")
		hi := rapid.IntRange(lo, n).Draw(t, "hi")
		for k := 0; k < 20; k++ {
			target := rapid.Uint64Range(0, w+2).Draw(t, "target")
			if k%2 == 0 && hi > lo {
				target = evs[rapid.IntRange(lo, hi-1).Draw(t, "at")].when + uint64(rapid.IntRange(0, 1).Draw(t, "plus"))
			}
			want := lo + sort.Search(hi-lo, func(i int) bool { return evs[lo+i].when >= target })
			if got := gallop(evs, uint32(lo), uint32(hi), target); int(got) != want {
				t.Fatalf("gallop(%d, %d, %d) = %d, want %d", lo, hi, target, got, want)
			}
		}
	})
}
