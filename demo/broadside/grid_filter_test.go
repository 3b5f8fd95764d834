package broadside

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGridPrefilters: the grid's bit prefilters never rule out what the
// exact tests would find. A path mayTouch rules out touches no ship
// (checked against every ship, brute force, and against touching); a
// point mayBeIsland rules out is on no island; a box offIslands rules
// out holds no point mayBeIsland accepts; a point mayBeNearIsland rules
// out is inside none of the inflated islands islandsNear lists. Paths and ships straddle the
// grid's edges, where cells are clamped.
func TestGridPrefilters(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := Rect{X0: 1_000_000, Y0: 500_000, X1: 5_000_000, Y1: 3_000_000}
	const margin = 46_000
	coord := func(lo, hi int32) int64 { return int64(lo) - 200_000 + rng.Int64N(int64(hi-lo)+400_000) }
	var filtered, touched, islandsRuled, ownerRuled int
	for round := range 20 {
		var islands []Island
		for range rng.IntN(12) {
			islands = append(islands, Island{X: int32(coord(r.X0, r.X1)), Y: int32(coord(r.Y0, r.Y1)), Radius: int32(20_000 + rng.IntN(200_000))})
		}
		g := newGrid(r, margin, islands)
		// A tick of other ships first: reset must empty their buckets.
		for i := range rng.IntN(300) {
			g.add(i, int32(coord(r.X0, r.X1)), int32(coord(r.Y0, r.Y1)), uint64(1000+i), false)
		}
		g.reset()
		type ship struct{ x, y int64 }
		var ships []ship
		for i := range rng.IntN(300) {
			s := ship{coord(r.X0, r.X1), coord(r.Y0, r.Y1)}
			// Some ships in clusters, so that paths meet them often.
			if i > 0 && rng.IntN(3) == 0 {
				s = ship{ships[i-1].x + rng.Int64N(60_000) - 30_000, ships[i-1].y + rng.Int64N(60_000) - 30_000}
			}
			ships = append(ships, s)
			g.add(i, int32(s.x), int32(s.y), uint64(i+1), rng.IntN(4) == 0)
		}
		for k := range 4000 {
			ax, ay := coord(r.X0, r.X1), coord(r.Y0, r.Y1)
			owner := -1
			if k%2 == 0 && len(ships) > 0 { // start near a ship, its owner
				owner = rng.IntN(len(ships))
				s := ships[owner]
				ax, ay = s.x+rng.Int64N(80_000)-40_000, s.y+rng.Int64N(80_000)-40_000
			}
			l := rng.Int64N(6_000)
			if k%7 == 0 {
				l = rng.Int64N(400_000) // a catch-up sweep
			}
			bx, by := ax+rng.Int64N(2*l+1)-l, ay+rng.Int64N(2*l+1)-l
			brute := 0
			for _, s := range ships {
				if _, ok := segmentContact(ax, ay, bx, by, s.x, s.y, ShipRadius); ok {
					brute++
				}
			}
			got := len(g.touching(ax, ay, bx, by, 0, nil))
			if got != brute {
				t.Fatalf("round %d: touching found %d ships, brute force %d", round, got, brute)
			}
			if !g.mayTouch(ax, ay, bx, by) {
				filtered++
				if brute != 0 {
					t.Fatalf("round %d: mayTouch(%d,%d→%d,%d) false but the path touches %d ships", round, ax, ay, bx, by, brute)
				}
			} else if brute > 0 {
				touched++
			}
			// Leaving out the owner (touching skips it by id).
			if owner >= 0 {
				own, ok := g.ownerBox(int32(owner), uint64(owner+1))
				if !ok {
					t.Fatalf("round %d: ownerBox of ship %d not found", round, owner)
				}
				if _, ok := g.ownerBox(int32(owner), uint64(owner+2)); ok {
					t.Fatalf("round %d: ownerBox found ship %d under another id", round, owner)
				}
				others := len(g.touching(ax, ay, bx, by, uint64(owner+1), nil))
				if !g.mayTouchBut(ax, ay, bx, by, &own) {
					ownerRuled++
					if others != 0 {
						t.Fatalf("round %d: mayTouchBut(%d,%d→%d,%d) false but the path touches %d ships besides its owner", round, ax, ay, bx, by, others)
					}
				}
			}
			// Grounding, for points anywhere.
			if !g.mayBeNearIsland(ax, ay) {
				for _, k := range g.islandsNear(ax, ay) {
					is := islands[k]
					dx, dy, rr := ax-int64(is.X), ay-int64(is.Y), int64(is.Radius)+ShipRadius
					if dx*dx+dy*dy < rr*rr {
						t.Fatalf("round %d: mayBeNearIsland(%d,%d) false but island %d is near", round, ax, ay, k)
					}
				}
			}
			// Islands, for points of the grid's area.
			px, py := ax, ay
			if px < g.x0 || py < g.y0 || px >= g.x0+int64(g.fnx)<<g.fshift || py >= g.y0+int64(g.fny)<<g.fshift {
				continue
			}
			on := false
			for _, is := range islands {
				dx, dy, rr := px-int64(is.X), py-int64(is.Y), int64(is.Radius)
				on = on || dx*dx+dy*dy < rr*rr
			}
			if !g.mayBeIsland(px, py) {
				islandsRuled++
				if on {
					t.Fatalf("round %d: mayBeIsland(%d,%d) false on an island", round, px, py)
				}
			}
			qx, qy := px+rng.Int64N(300_000), py+rng.Int64N(300_000)
			if g.offIslands(px, py, qx, qy) {
				for range 50 {
					x, y := px+rng.Int64N(qx-px+1), py+rng.Int64N(qy-py+1)
					if g.mayBeIsland(x, y) {
						t.Fatalf("round %d: offIslands(%d,%d..%d,%d) but (%d,%d) may be on an island", round, px, py, qx, qy, x, y)
					}
				}
			}
		}
	}
	t.Logf("paths ruled out %d, paths touching ships %d, points ruled off islands %d, paths ruled out but for their owner %d", filtered, touched, islandsRuled, ownerRuled)
	if filtered == 0 || touched == 0 || islandsRuled == 0 || ownerRuled == 0 {
		t.Fatal("the test exercised too little")
	}
}

// TestGridIncremental: a grid kept from round to round (begin, a put per
// ship, end), as Step keeps it, holds after every round exactly what a
// grid built afresh from the same ships holds: the same occ and occ2 bits,
// the same ships in each cell's bucket, the same owner boxes. Between
// rounds ships drift, jump, sink, leave, arrive and change slots.
func TestGridIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := Rect{X0: 0, Y0: 0, X1: 4_000_000, Y1: 4_000_000}
	const margin = MigrationMargin + ShipRadius
	type ship struct {
		x, y int32
		id   uint64
		live bool
	}
	ships := make([]ship, 300)
	for i := range ships {
		ships[i] = ship{int32(rng.IntN(4_200_000)) - 100_000, int32(rng.IntN(4_200_000)) - 100_000, uint64(i + 1), rng.IntN(4) != 0}
		if i > 0 && rng.IntN(3) == 0 { // clusters: cells covered twice
			ships[i].x, ships[i].y = ships[i-1].x+int32(rng.IntN(40_000))-20_000, ships[i-1].y+int32(rng.IntN(40_000))-20_000
		}
	}
	g := newGrid(r, margin, nil)
	moved := 0
	for round := range 200 {
		g.begin()
		for i := range ships {
			s := &ships[i]
			switch k := rng.IntN(100); {
			case k < 2:
				s.live = !s.live // leaves or arrives
			case k < 4:
				s.x, s.y = int32(rng.IntN(4_000_000)), int32(rng.IntN(4_000_000)) // respawn
			case k < 5:
				s.id += 1000 // another ship in the slot
			default:
				s.x += int32(rng.IntN(2*3*MaxSpeed+1)) - 3*MaxSpeed
				s.y += int32(rng.IntN(2*3*MaxSpeed+1)) - 3*MaxSpeed
			}
			switch {
			case !s.live:
			case round%5 != 0 && i%2 == 0 && g.putKept(i, s.x, s.y, s.id): // sailShips' fast path
				g.order = append(g.order, int32(i))
			default:
				g.put(i, s.x, s.y, s.id, round%5 == 0)
			}
		}
		g.end()
		f := newGrid(r, margin, nil)
		for i, s := range ships {
			if s.live {
				f.add(i, s.x, s.y, s.id, round%5 == 0)
			}
		}
		if !slices.Equal(g.occ, f.occ) || !slices.Equal(g.occ2, f.occ2) {
			t.Fatalf("round %d: occ/occ2 bits differ from a fresh grid's", round)
		}
		for c := range g.head {
			var a, b []int32
			for k := g.head[c]; k >= 0; k = g.ships[k].next {
				a = append(a, g.ships[k].slot)
				if s := ships[k]; g.ships[k].x != s.x || g.ships[k].y != s.y || g.ships[k].id != s.id || g.ships[k].sunk != (round%5 == 0) {
					t.Fatalf("round %d: slot %d's entry is stale", round, k)
				}
			}
			for k := f.head[c]; k >= 0; k = f.ships[k].next {
				b = append(b, f.ships[k].slot)
			}
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				t.Fatalf("round %d cell %d: ships %v, fresh grid %v", round, c, a, b)
			}
			moved += len(a)
		}
		for i, s := range ships {
			gb, gok := g.ownerBox(int32(i), s.id)
			fb, fok := f.ownerBox(int32(i), s.id)
			if gb != fb || gok != fok || gok != s.live {
				t.Fatalf("round %d slot %d: ownerBox %v %v, fresh %v %v", round, i, gb, gok, fb, fok)
			}
		}
		if !slices.Equal(g.order, f.order) {
			t.Fatalf("round %d: order differs", round)
		}
	}
	if moved == 0 {
		t.Fatal("no ship bucketed")
	}
}

// TestFineRect: the positions fineRect returns for a point are exactly
// those in its fine cell (fineXY gives the same cell at its corners and a
// different one just outside them, where they are bounded), which is what
// lets Sector.islandsNear keep a cell mayBeNearIsland ruled out.
func TestFineRect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	r := Rect{X0: 1_000_000, Y0: 500_000, X1: 5_000_000, Y1: 3_000_000}
	g := newGrid(r, MigrationMargin+ShipRadius, nil)
	edges := 0
	for range 20000 {
		x, y := int64(r.X0)-300_000+rng.Int64N(4_600_000), int64(r.Y0)-300_000+rng.Int64N(3_100_000)
		k := g.fineRect(x, y)
		if !k.holds(x, y) {
			t.Fatalf("fineRect(%d,%d) = %+v does not hold the point", x, y, k)
		}
		cx, cy := g.fineXY(x, y)
		same := func(px, py int64) bool { qx, qy := g.fineXY(px, py); return qx == cx && qy == cy }
		for _, p := range [][2]int64{{k.vx0, y}, {k.vx1 - 1, y}, {x, k.vy0}, {x, k.vy1 - 1}} {
			if p[0] == math.MinInt64 || p[0] == math.MaxInt64-1 || p[1] == math.MinInt64 || p[1] == math.MaxInt64-1 {
				edges++
				continue
			}
			if !same(p[0], p[1]) || !k.holds(p[0], p[1]) {
				t.Fatalf("fineRect(%d,%d) = %+v: (%d,%d) inside is in another cell", x, y, k, p[0], p[1])
			}
		}
		for j, p := range [][2]int64{{k.vx0 - 1, y}, {k.vx1, y}, {x, k.vy0 - 1}, {x, k.vy1}} {
			if bound := [...]int64{k.vx0, k.vx1, k.vy0, k.vy1}[j]; bound == math.MinInt64 || bound == math.MaxInt64 {
				continue
			}
			if same(p[0], p[1]) || k.holds(p[0], p[1]) {
				t.Fatalf("fineRect(%d,%d) = %+v: (%d,%d) outside is in the same cell", x, y, k, p[0], p[1])
			}
		}
	}
	if edges == 0 {
		t.Fatal("no point in an edge cell")
	}
}
