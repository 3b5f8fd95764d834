package broadside

import "math/rand/v2"

// Bot tuning.
const (
	// BotFireRange is the distance within which a bot fires on an enemy
	// abeam (the balls carry about 300 m).
	BotFireRange = 260_000
	// botAimTolerance is how far from the beam (binary angle, ≈10°) a
	// target may be for a bot to fire.
	botAimTolerance = 1800
)

// BotCommand returns the one command a simple captain of own would give
// now, or false if the ship's current orders are fine: keep way on, steer
// toward the nearest afloat enemy among nearby (which may include own), and
// when within BotFireRange bring it abeam and fire the loaded broadside that
// bears. It uses integer
// arithmetic only, so bots seeded alike play alike. r adds a little
// variety; it may be nil.
func BotCommand(nearby []ShipView, own ShipView, r *rand.Rand) (PlayerCommand, bool) {
	if own.Sunk {
		return PlayerCommand{}, false
	}
	jitter := func(n int) int32 {
		if r == nil {
			return 0
		}
		return int32(r.IntN(2*n+1) - n)
	}
	if own.Throttle < 50 {
		return Throttle(int8(80 + jitter(20))), true
	}
	var target *ShipView
	var best int64
	for k := range nearby {
		v := &nearby[k]
		if v.ID == own.ID || v.Sunk {
			continue
		}
		dx, dy := int64(v.X)-int64(own.X), int64(v.Y)-int64(own.Y)
		if d := dx*dx + dy*dy; target == nil || d < best {
			target, best = v, d
		}
	}
	if target == nil {
		// Nobody in sight: wander.
		if r != nil && r.IntN(8) == 0 {
			return Rudder(int8(jitter(40))), true
		}
		return PlayerCommand{}, false
	}
	dx, dy := int64(target.X)-int64(own.X), int64(target.Y)-int64(own.Y)
	rel := int32(int16(Atan2(dy, dx) - own.Heading)) // bearing off the bow, + to port
	desired := int32(0)                              // far: head for the target
	if best <= BotFireRange*BotFireRange {
		if abs(rel-int32(Deg90)) < botAimTolerance && own.PortReload == 0 {
			return Fire(Port), true
		}
		if abs(rel+int32(Deg90)) < botAimTolerance && own.StarboardReload == 0 {
			return Fire(Starboard), true
		}
		// Close: bring the target abeam on the side it is on.
		desired = int32(Deg90)
		if rel < 0 {
			desired = -int32(Deg90)
		}
	}
	// A positive error means the target is to port of where we want it:
	// turn to port (positive rudder).
	rudder := min(max((rel-desired)/60+jitter(5), -100), 100)
	if abs(rudder-int32(own.Rudder)) > 15 {
		return Rudder(int8(rudder)), true
	}
	return PlayerCommand{}, false
}

func abs(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// Fleet plays every ship of a world with BotCommand, the way the
// benchmarks, the demos and the viewer's generated matches do: each bot
// thinks every 10 ticks (staggered by player) about the ships within
// 1.5 km, and an aggressive fleet also fires a broadside every 40 ticks
// regardless, so that ships sink. Fleets seeded alike play alike.
type Fleet struct {
	Aggressive bool
	rng        *rand.Rand
	nearby     []ShipView
}

// NewFleet returns a fleet whose captains draw their variety from seed.
func NewFleet(seed uint64, aggressive bool) *Fleet {
	return &Fleet{Aggressive: aggressive, rng: rand.New(rand.NewPCG(seed, 7))}
}

// Act decides this tick's orders from the ships' views and gives each to
// submit.
func (f *Fleet) Act(tick uint64, views []ShipView, submit func(player uint32, c PlayerCommand)) {
	for k := range views {
		v := &views[k]
		phase := (tick + uint64(v.Player)) % 80
		if f.Aggressive && !v.Sunk && (phase == 0 || phase == 40) {
			side := Port
			if phase == 40 {
				side = Starboard
			}
			submit(v.Player, Fire(side))
			continue
		}
		if (tick+uint64(v.Player))%10 != 0 {
			continue
		}
		f.nearby = f.nearby[:0]
		for j := range views {
			o := &views[j]
			if dx, dy := int64(o.X-v.X), int64(o.Y-v.Y); dx*dx+dy*dy < 1_500_000*1_500_000 {
				f.nearby = append(f.nearby, *o)
			}
		}
		if c, ok := BotCommand(f.nearby, *v, f.rng); ok {
			submit(v.Player, c)
		}
	}
}
