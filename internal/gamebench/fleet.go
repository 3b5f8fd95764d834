package gamebench

import (
	"math/rand/v2"

	"github.com/anoptic/broadside/demo/broadside"
)

// botFleet plays the bots of the generation phase: they look at the world
// between ticks (the runners are idle then, in lockstep), steer toward the
// nearest enemy with broadside.BotCommand and fire on a schedule, enough to
// keep about 10,000 cannonballs in the air with 1,000 ships.
type botFleet struct {
	fleet   *broadside.Fleet
	players uint32
	seq     uint64
	views   []broadside.ShipView
}

func newBotFleet(players uint32, seed uint64) *botFleet {
	return &botFleet{fleet: broadside.NewFleet(seed, true), players: players}
}

func commandEnvelope(player uint32, seq uint64, c broadside.PlayerCommand) []byte {
	rec, err := broadside.CommandRecord(player, seq, c)
	if err != nil {
		panic(err) // the fleet only builds valid commands
	}
	return rec
}

// records returns the envelopes the fleet sends before TICK(tick).
func (f *botFleet) records(tick uint64, sectors []*broadside.Sector) [][]byte {
	var out [][]byte
	emit := func(p uint32, c broadside.PlayerCommand) {
		f.seq++
		out = append(out, commandEnvelope(p, f.seq, c))
	}
	if tick == 1 {
		for p := uint32(1); p <= f.players; p++ {
			emit(p, broadside.Join())
		}
		return out
	}
	f.views = f.views[:0]
	for _, s := range sectors {
		if s != nil {
			s.Ships(func(v broadside.ShipView) { f.views = append(f.views, v) })
		}
	}
	f.fleet.Act(tick, f.views, emit)
	return out
}

// scriptedBots plays bots without looking at the world (for the live phase,
// where the sectors are being stepped): random orders and broadsides on a
// schedule.
type scriptedBots struct {
	rng     *rand.Rand
	players uint32
	seq     uint64
}

func newScriptedBots(players uint32, seed uint64) *scriptedBots {
	return &scriptedBots{rng: rand.New(rand.NewPCG(seed, 11)), players: players}
}

func (b *scriptedBots) records(tick uint64) [][]byte {
	var out [][]byte
	emit := func(p uint32, c broadside.PlayerCommand) {
		b.seq++
		out = append(out, commandEnvelope(p, b.seq, c))
	}
	for p := uint32(1); p <= b.players; p++ {
		switch phase := (tick + uint64(p)) % 80; {
		case phase == 0:
			emit(p, broadside.Fire(broadside.Port))
		case phase == 40:
			emit(p, broadside.Fire(broadside.Starboard))
		case b.rng.IntN(10) == 0:
			emit(p, broadside.Rudder(int8(b.rng.IntN(201)-100)))
		case b.rng.IntN(50) == 0:
			emit(p, broadside.Throttle(int8(40+b.rng.IntN(61))))
		}
	}
	return out
}
