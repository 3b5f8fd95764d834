package broadside

import (
	"math/rand/v2"
	"testing"
)

// TestGridShipsIn: the summed-area table counts the ships of a box of
// cells exactly as adding up the cells' ships does.
func TestGridShipsIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := newGrid(Rect{X0: 0, Y0: 0, X1: 8_000_000, Y1: 5_000_000}, 100_000, nil)
	for round := range 20 {
		g.reset()
		for i := range rng.IntN(40) {
			g.add(i, int32(rng.IntN(8_200_000))-100_000, int32(rng.IntN(5_200_000))-100_000, uint64(i+1), false)
		}
		g.place()
		for range 500 {
			cx0, cy0 := rng.IntN(g.nx), rng.IntN(g.ny)
			cx1, cy1 := cx0+rng.IntN(min(4, g.nx-cx0)), cy0+rng.IntN(min(4, g.ny-cy0))
			var want int32
			for cy := cy0; cy <= cy1; cy++ {
				for cx := cx0; cx <= cx1; cx++ {
					c := cy*g.nx + cx
					want += g.start[c+1] - g.start[c]
				}
			}
			if got := g.shipsIn(cx0, cy0, cx1, cy1); got != want {
				t.Fatalf("round %d: box %d,%d..%d,%d: %d ships, want %d", round, cx0, cy0, cx1, cy1, got, want)
			}
		}
	}
}
