package gamebench

import (
	"math/rand/v2"

	"github.com/anoptic/broadside/demo/broadside"
)

// botFleet plays the bots of the generation phase (broadside.Bots): they
// look at the world between ticks (the runners are idle then, in
// lockstep), steer toward the nearest enemy and fire on a schedule, enough
// to keep about 10,000 cannonballs in the air with 1,000 ships.
type botFleet struct {
	bots *broadside.Bots
	seq  uint64
}

func newBotFleet(players uint32, seed uint64) *botFleet {
	return &botFleet{bots: broadside.NewBots(int(players), seed)}
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
	ships := func(fn func(broadside.ShipView)) {
		for _, s := range sectors {
			if s != nil {
				s.Ships(fn)
			}
		}
	}
	f.bots.Orders(tick, ships, func(p uint32, c broadside.PlayerCommand) {
		f.seq++
		out = append(out, commandEnvelope(p, f.seq, c))
	})
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
