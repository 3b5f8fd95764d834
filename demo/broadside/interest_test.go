package broadside

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/anoptic/broadside/lineage"
)

// randomFrame returns an unsealed frame of tick with ships ships (players
// 1..ships) and balls balls at random positions, negative ones included,
// moved a little from seed to seed.
func randomFrame(r *rand.Rand, tick uint64, ships, balls int) *Frame {
	f := NewFrame(tick)
	pos := func() int32 { return int32(r.IntN(8_000_000) - 4_000_000) }
	for i := range ships {
		f.Ships = append(f.Ships, ShipView{ID: lineage.EntityID(1000 + 3*i), Player: uint32(i + 1), X: pos(), Y: pos(), Hull: 100})
	}
	for i := range balls {
		f.Balls = append(f.Balls, BallView{ID: lineage.EntityID(1 << 20 * (i + 1)), Owner: 1000, X: pos(), Y: pos(), VX: 3, VY: -2, Lifetime: 90})
	}
	r.Shuffle(len(f.Ships), func(i, j int) { f.Ships[i], f.Ships[j] = f.Ships[j], f.Ships[i] })
	r.Shuffle(len(f.Balls), func(i, j int) { f.Balls[i], f.Balls[j] = f.Balls[j], f.Balls[i] })
	return f
}

// TestInterestIsThe3x3Cells checks each player's interest set against a
// brute force: every ship and ball whose cell is at most one cell away
// from the player's anchor cell in both axes, in increasing index order;
// a player absent from the frame keeps the anchor of the previous one.
func TestInterestIsThe3x3Cells(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const radius = 600_000
	prev := randomFrame(r, 1, 300, 2000)
	prev.Seal(nil, radius)
	f := randomFrame(r, 2, 250, 2500) // players 251..300 are between sectors
	f.Seal(prev, radius)
	for viewer := uint32(1); viewer <= 301; viewer++ {
		var anchor [2]int64
		src := f
		if viewer > 250 {
			src = prev
		}
		found := false
		for _, v := range src.Ships {
			if v.Player == viewer {
				anchor, found = src.cellOf(v.X, v.Y), true
			}
		}
		near := func(c [2]int64) bool {
			return c[0] >= anchor[0]-1 && c[0] <= anchor[0]+1 && c[1] >= anchor[1]-1 && c[1] <= anchor[1]+1
		}
		var wantS, wantB []int32
		for i, v := range f.Ships {
			if found && near(f.cellOf(v.X, v.Y)) {
				wantS = append(wantS, int32(i))
			}
		}
		for i, v := range f.Balls {
			if found && near(f.cellOf(v.X, v.Y)) {
				wantB = append(wantB, int32(i))
			}
		}
		gotS, gotB := f.interest(viewer, nil, nil)
		if !slices.Equal(gotS, wantS) || !slices.Equal(gotB, wantB) {
			t.Fatalf("viewer %d (anchor %v, found %v): ships %v want %v; balls %d want %d", viewer, anchor, found, gotS, wantS, len(gotB), len(wantB))
		}
	}
}

// BenchmarkFrameSeal: one tick's frame of 300 ships and 3,000 balls
// assembled and sealed, as the world does once per tick.
func BenchmarkFrameSeal(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := randomFrame(r, 2, 300, 3000)
	prev := randomFrame(r, 1, 300, 3000)
	prev.Seal(nil, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f := NewFrame(2)
		f.Ships = append(f.Ships[:0:0], src.Ships...)
		f.Balls = append(f.Balls[:0:0], src.Balls...)
		f.Seal(prev, 0)
	}
}

// BenchmarkStateEncode: one player's delta against a tick 3 back, with
// the ships moved and half the balls changed, as the fan-out encodes it.
func BenchmarkStateEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	base := randomFrame(r, 10, 300, 3000)
	cur := &Frame{Tick: 13, Ships: slices.Clone(base.Ships), Balls: slices.Clone(base.Balls)}
	for i := range cur.Ships {
		cur.Ships[i].X += 300
	}
	for i := range cur.Balls {
		cur.Balls[i].X += 9
		cur.Balls[i].Y -= 6
		cur.Balls[i].Age += 3
		if i%2 == 0 {
			cur.Balls[i].VX++
		}
	}
	base.Seal(nil, 0)
	cur.Seal(base, 0)
	var enc StateEncoder
	var dst []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = enc.Encode(dst[:0], cur, base, uint32(1+i%300))
	}
}

// TestInterestAtTheEdges: cells at the ends of the coordinate range (a
// 1 mm radius) see their neighbours and nothing wraps around.
func TestInterestAtTheEdges(t *testing.T) {
	const lo, hi = -1 << 31, 1<<31 - 1
	f := NewFrame(1)
	f.Ships = []ShipView{{ID: 1, Player: 1, X: hi, Y: hi}, {ID: 2, Player: 2, X: hi - 1, Y: hi}, {ID: 3, Player: 3, X: lo, Y: lo},
		{ID: 4, Player: 4, X: lo, Y: lo + 1}, {ID: 5, Player: 5, X: lo, Y: hi}, {ID: 6, Player: 6, X: hi, Y: lo}}
	f.Seal(nil, 1)
	want := map[uint32][]int32{1: {0, 1}, 2: {0, 1}, 3: {2, 3}, 4: {2, 3}, 5: {4}, 6: {5}}
	for viewer, w := range want {
		if got, _ := f.interest(viewer, nil, nil); !slices.Equal(got, w) {
			t.Fatalf("viewer %d sees %v, want %v", viewer, got, w)
		}
	}
}

// TestTrackerScratchIsNotShared: frames a StateTracker returned stay as
// ApplyDelta builds them while later updates reuse its scratch space.
func TestTrackerScratchIsNotShared(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var frames []*Frame
	var enc StateEncoder
	var tr StateTracker
	var got, want []*Frame
	for tick := uint64(1); tick <= 40; tick++ {
		f := randomFrame(r, tick, 60, 400)
		var prev *Frame
		if len(frames) > 0 {
			prev = frames[len(frames)-1]
		}
		f.Seal(prev, 1_500_000)
		frames = append(frames, f)
		var base *Frame
		baseTick := uint64(0)
		if tick > 3 {
			base, baseTick = frames[len(frames)-4], tick-3
		}
		p := enc.Encode(nil, f, base, 7)
		g, err := tr.Apply(tick, baseTick, p)
		if err != nil {
			t.Fatal(err)
		}
		var wbase *Frame
		if base != nil {
			wbase = want[len(want)-3]
		}
		w, err := ApplyDelta(wbase, tick, p)
		if err != nil {
			t.Fatal(err)
		}
		got, want = append(got, g), append(want, w)
	}
	for i := range got {
		if !reflect.DeepEqual(normalize(got[i]), normalize(want[i])) {
			t.Fatalf("frame of tick %d changed after later updates", got[i].Tick)
		}
	}
}

// BenchmarkTrackerApply: a bot applying one delta (against a tick 3 back)
// of 60 ships and 400 balls around it.
func BenchmarkTrackerApply(b *testing.B) {
	_, payloads := deltaTape(rand.New(rand.NewPCG(3, 4)), 16, 10_000_000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var tr StateTracker
		for k, p := range payloads {
			tick, base := uint64(k+1), uint64(0)
			if tick > 3 {
				base = tick - 3
			}
			if _, err := tr.Apply(tick, base, p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// reuseTape is a sequence of sealed frames and the deltas viewer 7 gets
// of them (tick k against tick k-3, full for the first 3).
func reuseTape(n int) (frames []*Frame, payloads [][]byte) {
	return deltaTape(rand.New(rand.NewPCG(5, 6)), n, 1_500_000)
}

// deltaTape is n random frames of 60 ships and 400 balls, sealed with
// radius, and the deltas viewer 7 gets of them (tick k against tick k-3,
// full for the first 3).
func deltaTape(r *rand.Rand, n int, radius int64) (frames []*Frame, payloads [][]byte) {
	var enc StateEncoder
	for tick := uint64(1); tick <= uint64(n); tick++ {
		f := randomFrame(r, tick, 60, 400)
		var prev *Frame
		if len(frames) > 0 {
			prev = frames[len(frames)-1]
		}
		f.Seal(prev, radius)
		frames = append(frames, f)
		var base *Frame
		if tick > 3 {
			base = frames[len(frames)-4]
		}
		payloads = append(payloads, enc.Encode(nil, f, base, 7))
	}
	return frames, payloads
}

func baseOf(tick uint64) uint64 {
	if tick > 3 {
		return tick - 3
	}
	return 0
}

// TestTrackerReuseMatches: a tracker that reuses old frames' memory
// (Reuse) returns, update after update, the frames a fresh decode gives,
// also after a malformed update that failed half-way through a reused
// frame.
func TestTrackerReuseMatches(t *testing.T) {
	_, payloads := reuseTape(80)
	reuse, plain := StateTracker{Reuse: true}, StateTracker{}
	for k, p := range payloads {
		tick := uint64(k + 1)
		if tick == 50 {
			// Truncated: it fails after the ships were decoded into the
			// frame of tick 34, which it was reusing.
			if _, err := reuse.Apply(tick, baseOf(tick), p[:len(p)/2]); !errors.Is(err, ErrBadState) {
				t.Fatalf("truncated update: %v", err)
			}
		}
		g, err := reuse.Apply(tick, baseOf(tick), p)
		if err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
		w, err := plain.Apply(tick, baseOf(tick), p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(g), normalize(w)) {
			t.Fatalf("tick %d: the reusing tracker's frame differs from a fresh decode", tick)
		}
	}
}

// FuzzTrackerReuse: whatever update a reusing tracker is given (and
// fails or applies), the next valid update gives the frame a fresh decode
// does.
func FuzzTrackerReuse(f *testing.F) {
	_, payloads := reuseTape(24)
	f.Add(payloads[20])
	f.Add(payloads[20][:len(payloads[20])/2])
	f.Add([]byte{stateFormat, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		reuse, plain := StateTracker{Reuse: true}, StateTracker{}
		for k, q := range payloads[:20] {
			tick := uint64(k + 1)
			if _, err := reuse.Apply(tick, baseOf(tick), q); err != nil {
				t.Fatal(err)
			}
			if _, err := plain.Apply(tick, baseOf(tick), q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reuse.Apply(21, baseOf(21), p); err != nil && !errors.Is(err, ErrBadState) {
			t.Fatalf("error does not wrap ErrBadState: %v", err)
		}
		// Tick 22 against 19, which the tracker still holds whatever
		// tick 21 did.
		g, err := reuse.Apply(22, 19, payloads[21])
		if err != nil {
			t.Fatal(err)
		}
		w, err := plain.Apply(22, 19, payloads[21])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(g), normalize(w)) {
			t.Fatal("after a fuzzed update, the reusing tracker's frame differs from a fresh decode")
		}
	})
}

// BenchmarkTrackerRounds: 16 updates (3 full, then deltas against a tick
// 3 back, 60 ships and 400 balls) per op into one tracker whose ticks go
// on from round to round, as a bot's, with and without Reuse.
func BenchmarkTrackerRounds(b *testing.B) {
	_, payloads := reuseTape(16)
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			tr := StateTracker{Reuse: reuse}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				for k, p := range payloads {
					tick := uint64(i*16 + k + 1)
					base := uint64(0)
					if k > 2 {
						base = tick - 3
					}
					if _, err := tr.Apply(tick, base, p); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
