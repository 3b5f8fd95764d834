package broadside

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/table"
)

// callLog records a Step's lineage calls in order.
type callLog struct{ calls []string }

func (c *callLog) Command(e lineage.EntityID, pos uint64) {
	c.calls = append(c.calls, fmt.Sprintf("C %d %d", e, pos))
}

func (c *callLog) Derived(e, from lineage.EntityID) {
	c.calls = append(c.calls, fmt.Sprintf("D %d %d", e, from))
}

// TestBallSleepSound replays bot battles twice from the same captures, with
// sleeping cannonballs and without (every ball through flyBalls' general
// tests every tick: no sleeping, no quiet flights), and
// requires the same state hash, outputs and lineage calls at every tick of
// every sector. The worlds are small and crowded, so that ships appear
// (joins, arrivals, respawns) and run aground while balls sleep. And at
// every tick, before the balls fly, no sleeping ball's path of the tick
// touches a ship but its owner (what flyBalls would have found had it
// visited the ball): a hash catches a missed hit only if one happens.
func TestBallSleepSound(t *testing.T) {
	if testing.Short() {
		t.Skip("plays 3 battles")
	}
	cases := []struct {
		cfg   Config
		ships int
		ticks int
	}{
		{Config{Seed: 3, Width: 3000, Height: 3000, SectorsX: 3, SectorsY: 3, Islands: 20}, 400, 500},
		{Config{Seed: 4, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 30}, 300, 500},
		{Config{Seed: 5, Width: 1500, Height: 1500, SectorsX: 1, SectorsY: 3, Islands: 8}, 200, 500},
	}
	for n, c := range cases {
		w := newBotWorld(t, c.cfg, c.ships, uint64(n+1), 0)
		for range 100 {
			w.step(t, nil)
		}
		var caps []*table.SetCapture
		for _, s := range w.Sectors() {
			caps = append(caps, s.Tables().CaptureFull())
		}
		tp := &tape{cfg: c.cfg, caps: caps}
		on, off := restoreTape(t, tp), restoreTape(t, tp)
		for _, s := range off {
			s.sleep.off = true
			// Nor quiet flights: every ball through flyBalls' general
			// tests at every tick, as if the sector had no ballHot.
			s.sleepCheck = func() {
				for k := range s.hot {
					s.hot[k].quiet, s.hot[k].last, s.hot[k].born = 1, 0, false
				}
			}
		}
		slept, checked := 0, 0
		for i, s := range on {
			s.sleepCheck = func() {
				z, tk := &s.sleep, s.tick
				for w, word := range z.asleep {
					for ; word != 0; word &= word - 1 {
						b := w<<6 | bits.TrailingZeros64(word)
						h := &s.hot[b]
						if tk < h.quiet || tk > h.last {
							t.Fatalf("case %d sector %d tick %d: ball slot %d asleep outside its quiet flight %d..%d", n, i, tk, b, h.quiet, h.last)
						}
						x, y := h.at(tk)
						if found := s.grid.touching(x-int64(h.vx), y-int64(h.vy), x, y, h.owner, nil); len(found) > 0 {
							t.Fatalf("case %d sector %d tick %d: ball slot %d asleep but its path touches ship %#x", n, i, tk, b, found[0].ship.id)
						}
						checked++
					}
				}
			}
		}
		for k := range c.ticks {
			cmds := w.step(t, nil)
			tick := w.Tick()
			for i := range on {
				var la, lb callLog
				oa := on[i].Step(tick, cmds, &la)
				ob := off[i].Step(tick, cmds, &lb)
				if on[i].Hash() != off[i].Hash() {
					t.Fatalf("case %d tick %d (%d after the captures) sector %d: hash %#x sleeping, %#x not", n, tick, k, i, on[i].Hash(), off[i].Hash())
				}
				if len(oa) != len(ob) {
					t.Fatalf("case %d tick %d sector %d: %d outputs sleeping, %d not", n, tick, i, len(oa), len(ob))
				}
				for j := range oa {
					if !slices.Equal(oa[j].Payload, ob[j].Payload) {
						t.Fatalf("case %d tick %d sector %d: output %d differs", n, tick, i, j)
					}
				}
				if !slices.Equal(la.calls, lb.calls) {
					t.Fatalf("case %d tick %d sector %d: lineage differs:\n%v\n%v", n, tick, i, la.calls, lb.calls)
				}
				slept += on[i].sleep.nAsleep
				if off[i].sleep.nAsleep != 0 {
					t.Fatalf("case %d: a ball slept with sleeping off", n)
				}
			}
		}
		t.Logf("case %d: %d ships, %d sectors: %.0f balls asleep per sector-tick, %d balls at the end", n, c.ships, len(on), float64(slept)/float64(c.ticks*len(on)), w.BallCount())
		if slept == 0 || checked == 0 {
			t.Fatalf("case %d: no ball ever slept", n)
		}
	}
}

// TestRowBits checks the sleeper's row layout against the grid's linear
// one: the same boxes marked, the same answers of anyBut (and of anyRows,
// anyBut without an owner) for random boxes and owners, at the grid's
// edges and across words too.
func TestRowBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	g := newGrid(Rect{X0: 0, Y0: 0, X1: 4_000_000, Y1: 3_000_000}, 46_000, nil)
	box := func() fineBox {
		x0, y0 := int32(rng.IntN(g.fnx)), int32(rng.IntN(g.fny))
		wide := 12
		if rng.IntN(8) == 0 {
			wide = 150 // over three words of a row
		}
		return fineBox{x0, y0, min(x0+int32(rng.IntN(wide)), int32(g.fnx-1)), min(y0+int32(rng.IntN(12)), int32(g.fny-1))}
	}
	var agree, marked int
	for round := range 50 {
		one, two := make([]uint64, len(g.occ)), make([]uint64, len(g.occ))
		bone, btwo := newRowBits(g), newRowBits(g)
		var boxes []fineBox
		for range rng.IntN(400) {
			b := box()
			boxes = append(boxes, b)
			markTwice(g, one, two, b)
			markTwiceRows(&bone, &btwo, b)
		}
		for cy := range g.fny {
			for cx := range g.fnx {
				c := cy*g.fnx + cx
				k, bit := cy*bone.stride+cx>>6, uint(cx&63)
				if (one[c>>6]>>(uint(c)&63))&1 != (bone.w[k]>>bit)&1 || (two[c>>6]>>(uint(c)&63))&1 != (btwo.w[k]>>bit)&1 {
					t.Fatalf("round %d: cell (%d, %d) marked differently", round, cx, cy)
				}
			}
		}
		for range 2000 {
			b := box()
			var own *fineBox
			if len(boxes) > 0 && rng.IntN(2) == 0 {
				own = &boxes[rng.IntN(len(boxes))]
			}
			lin, blk := g.anyBut(one, two, &b, own), anyButRows(&bone, &btwo, &b, own)
			if lin != blk {
				t.Fatalf("round %d: anyBut(%v, own %v) = %v linear, %v in rows", round, b, own, lin, blk)
			}
			if lin, blk := g.anyBut(one, two, &b, nil), anyRows(&bone, &b); lin != blk {
				t.Fatalf("round %d: any(%v) = %v linear, %v in rows", round, b, lin, blk)
			}
			agree++
			if lin {
				marked++
			}
		}
	}
	if marked == 0 || marked == agree {
		t.Fatalf("the test exercised too little: %d of %d boxes marked", marked, agree)
	}
}

// TestTicksIn checks cacheBall's count of the steps a flight stays in a
// box against stepping it, for speeds of either sign, zero, and points at
// both edges.
func TestTicksIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 20000 {
		lo := rng.Int64N(2000) - 1000
		hi := lo + 1 + rng.Int64N(3000)
		p := lo + rng.Int64N(hi-lo)
		v := rng.Int64N(401) - 200
		got := ticksIn(p, v, lo, hi)
		if v == 0 {
			if got != math.MaxUint64 {
				t.Fatalf("ticksIn(%d, 0, %d, %d) = %d, want all", p, lo, hi, got)
			}
			continue
		}
		var want uint64
		for q := p + v; q >= lo && q < hi; q += v {
			want++
		}
		if got != want {
			t.Fatalf("ticksIn(%d, %d, %d, %d) = %d, want %d", p, v, lo, hi, got, want)
		}
	}
}

// TestQuietFlight checks cacheBall's quiet window against stepping the
// flight through flyBalls' general tests (in flight, in the world, in the
// sector, not splashing on an island: mayBeIsland and then splashes): the
// window must end just before the first tick that fails one, for balls
// fired at and past islands, through island boxes they miss, and from
// inside islands; and born must say whether the spawn tick passes them.
func TestQuietFlight(t *testing.T) {
	cfg := Config{Seed: 9, Width: 3000, Height: 3000, SectorsX: 3, SectorsY: 3, Islands: 40}
	rng := rand.New(rand.NewPCG(13, 14))
	grazed, unborn := 0, 0
	for sec := range cfg.Sectors() {
		s, err := NewSector(cfg, sec)
		if err != nil {
			t.Fatal(err)
		}
		isl := s.geo.islands
		for range 600 {
			is := isl[rng.IntN(len(isl))]
			r := int64(is.Radius)
			x := int64(is.X) + rng.Int64N(8*r+1) - 4*r
			y := int64(is.Y) + rng.Int64N(8*r+1) - 4*r
			if !s.bounds.Contains(x, y) {
				continue
			}
			vx, vy := int32(rng.IntN(8001)-4000), int32(rng.IntN(8001)-4000)
			if rng.IntN(20) == 0 {
				vx = 0
			}
			spawn := uint64(1000 + rng.IntN(50))
			i, err := s.balls.Alloc()
			if err != nil {
				t.Fatal(err)
			}
			w := s.balls.Mut(i)
			w.SetU64(blID, uint64(i+1))
			w.SetI32(blX0, int32(x))
			w.SetI32(blY0, int32(y))
			w.SetI32(blVX, vx)
			w.SetI32(blVY, vy)
			w.SetU64(blSpawn, spawn)
			w.SetU32(blLifetime, uint32(BallLifetime+rng.IntN(11)-5))
			s.cacheBall(i, -1)
			h := &s.hot[i]
			r0 := s.balls.Row(i)
			px, py := ballAt(r0, spawn)
			if born := s.geo.inWorld(px, py) && s.bounds.Contains(px, py) && !(s.grid.mayBeIsland(px, py) && s.splashes(px, py)); h.born != born {
				t.Fatalf("sector %d: ball fired at (%d,%d): born %v, the general tests say %v", sec, px, py, h.born, born)
			} else if !born {
				unborn++
			}
			want := h.quiet - 1
			for tk := h.quiet; ; tk++ {
				px, py := ballAt(r0, tk)
				if tk-spawn > uint64(r0.U32(blLifetime)) || !s.geo.inWorld(px, py) || !s.bounds.Contains(px, py) ||
					(s.grid.mayBeIsland(px, py) && s.splashes(px, py)) {
					break
				}
				if s.grid.mayBeIsland(px, py) {
					grazed++
				}
				want = tk
			}
			if h.last != want {
				t.Fatalf("sector %d: ball from (%d,%d) v (%d,%d): quiet %d..%d, stepping gives ..%d", sec, x, y, vx, vy, h.quiet, h.last, want)
			}
			s.balls.Free(i)
		}
	}
	if grazed == 0 || unborn == 0 {
		t.Fatalf("%d quiet ticks in an island's box, %d balls fired on an island: the test exercised too little", grazed, unborn)
	}
}

// TestFirstInside checks firstInside against stepping u from 0 to n.
func TestFirstInside(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	found := 0
	for range 200000 {
		r := 1 + rng.Int64N(300)
		dx, dy := rng.Int64N(4000)-2000, rng.Int64N(4000)-2000
		vx, vy := rng.Int64N(201)-100, rng.Int64N(201)-100
		if rng.IntN(10) == 0 {
			vx, vy = 0, 0
		}
		n := uint64(rng.IntN(120))
		want, wok := uint64(0), false
		for u := uint64(0); u <= n; u++ {
			if x, y := dx+vx*int64(u), dy+vy*int64(u); x*x+y*y < r*r {
				want, wok = u, true
				break
			}
		}
		got, ok := firstInside(dx, dy, vx, vy, r, n)
		if ok != wok || got != want && ok {
			t.Fatalf("firstInside(%d,%d, %d,%d, r %d, n %d) = %d %v, stepping %d %v", dx, dy, vx, vy, r, n, got, ok, want, wok)
		}
		if ok {
			found++
		}
	}
	if found == 0 {
		t.Fatal("no point ever inside")
	}
}
