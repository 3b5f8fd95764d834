package broadside

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkGridBuild is one tick's grid for 250 ships, about a sector's
// share of the benchmark tape, as Step builds it: begin, a put per ship,
// end (the grid is then ready for hit tests). The ships sit in a 4 × 4 km
// sector (about 4,000 cells), a third of them in clusters, and move a
// little each tick (a ship crosses a fine cell every ~50 ticks at top
// speed). Before session 11 it measured reset and an add per ship.
func BenchmarkGridBuild(b *testing.B) {
	g := newGrid(Rect{X0: 0, Y0: 0, X1: 4_000_000, Y1: 4_000_000}, MigrationMargin+ShipRadius, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	type point struct{ x, y int32 }
	var ships []point
	for i := range 250 {
		p := point{int32(rng.IntN(4_000_000)), int32(rng.IntN(4_000_000))}
		if i > 0 && rng.IntN(3) == 0 {
			p = point{ships[i-1].x + int32(rng.IntN(60_000)) - 30_000, ships[i-1].y + int32(rng.IntN(60_000)) - 30_000}
		}
		ships = append(ships, p)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		g.begin()
		for i, p := range ships {
			g.put(i, p.x+int32(n&7)*MaxSpeed, p.y, uint64(i+1), false)
		}
		g.end()
	}
}
