package broadside

import (
	"math/rand/v2"
	"testing"
)

// botFleet plays every ship of a world with BotCommand, the way the load
// bots will: each bot thinks every `every` ticks (staggered by player), and
// an aggressive fleet also fires a broadside every 40 ticks regardless, to
// keep ~10 balls per ship in the air.
type botFleet struct {
	w          *World
	rng        *rand.Rand
	players    uint32
	every      int
	aggressive bool
	views      []ShipView
	nearby     []ShipView
}

// newFleet joins players 1..n to w.
func newFleet(t testing.TB, w *World, n uint32, seed uint64) *botFleet {
	for p := uint32(1); p <= n; p++ {
		if err := w.SubmitCommand(p, Join()); err != nil {
			t.Fatal(err)
		}
	}
	return &botFleet{w: w, rng: rand.New(rand.NewPCG(seed, 7)), players: n, every: 10}
}

// act queues this tick's bot commands.
func (f *botFleet) act() {
	tick := int(f.w.Tick())
	f.views = f.views[:0]
	f.w.Ships(func(v ShipView) { f.views = append(f.views, v) })
	for k := range f.views {
		v := &f.views[k]
		phase := (tick + int(v.Player)) % 80
		if f.aggressive && !v.Sunk && (phase == 0 || phase == 40) {
			side := Port
			if phase == 40 {
				side = Starboard
			}
			f.w.SubmitCommand(v.Player, Fire(side))
			continue
		}
		if (tick+int(v.Player))%f.every != 0 {
			continue
		}
		f.nearby = f.nearby[:0]
		for j := range f.views {
			o := &f.views[j]
			if dx, dy := int64(o.X-v.X), int64(o.Y-v.Y); dx*dx+dy*dy < 1_500_000*1_500_000 {
				f.nearby = append(f.nearby, *o)
			}
		}
		if c, ok := BotCommand(f.nearby, *v, f.rng); ok {
			f.w.SubmitCommand(v.Player, c)
		}
	}
}
