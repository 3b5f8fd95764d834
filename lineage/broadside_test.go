package lineage_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// submission is a player command submitted before a tick.
type submission struct {
	player  uint32
	payload []byte
	// transit: given while the player's ship was between sectors.
	transit bool
}

// script is a match's player commands: script[k] is submitted before the
// world's tick k+1. Replaying a script replays the match exactly.
type script [][]submission

// match describes a bot battle: the world, its ships and length, and how
// many ticks late migrations reach the log (so that orders are given to
// ships in transit between sectors).
type match struct {
	cfg   broadside.Config
	ships uint32
	ticks int
	delay int
}

// world returns the match's world at tick 0, its sectors run by
// world.LocalWorld's Runners with migrations reaching the log m.delay
// ticks late; rec (nil: none) receives the sectors' lineage as a plain
// Recorder (callers bracket the ticks), and input, if set, is given each
// tick's input records (valid during the call).
func (m *match) world(t testing.TB, rec lineage.Recorder, input func([]replay.Command)) *world.LocalWorld {
	t.Helper()
	g, err := broadside.NewGame(m.cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	lc := world.LocalConfig{Game: g, OutputDelay: m.delay}
	if rec != nil {
		lc.Recorder = func(uint32) lineage.Recorder { return rec }
	}
	if input != nil {
		lc.Observer = func(info replay.TickInfo) {
			if info.Shard == 0 { // every sector reads the whole input
				input(info.Commands)
			}
		}
	}
	w, err := world.NewLocal(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// ships calls fn for every ship of w, sector by sector.
func ships(w *world.LocalWorld, fn func(broadside.ShipView)) {
	for i := range w.Shards() {
		w.Sim(uint32(i)).(*broadside.Sector).Ships(fn)
	}
}

// playBots plays the match with bots and returns its script. Each bot thinks every few ticks (BotCommand, seeing every ship)
// and now and then fires a broadside regardless, to make hits common.
func playBots(t testing.TB, m *match, seed uint64) script {
	t.Helper()
	w := m.world(t, nil, nil)
	nShips, ticks := m.ships, m.ticks
	rng := rand.New(rand.NewPCG(seed, 0x0bac1e))
	sc := make(script, ticks)
	join, _ := broadside.EncodeCommand(broadside.Join())
	for p := uint32(1); p <= nShips; p++ {
		sc[0] = append(sc[0], submission{p, join, false})
	}
	var views []broadside.ShipView
	for k := 0; k < ticks; k++ {
		if k > 0 {
			views = views[:0]
			ships(w, func(v broadside.ShipView) { views = append(views, v) })
			seen := make([]bool, nShips+1)
			for i := range views {
				seen[views[i].Player] = true
			}
			// A captain whose ship is between sectors still gives orders
			// (the destination obeys them on arrival).
			for p := uint32(1); p <= nShips; p++ {
				if !seen[p] && rng.IntN(2) == 0 {
					c := []broadside.PlayerCommand{broadside.Throttle(int8(rng.IntN(101))), broadside.Rudder(int8(rng.IntN(201) - 100)), broadside.Fire(broadside.Port)}[rng.IntN(3)]
					b, err := broadside.EncodeCommand(c)
					if err != nil {
						t.Fatal(err)
					}
					sc[k] = append(sc[k], submission{p, b, true})
				}
			}
			for i := range views {
				v := &views[i]
				if (k+int(v.Player))%6 != 0 {
					continue
				}
				c, ok := broadside.BotCommand(views, *v, rng)
				if !ok && !v.Sunk && rng.IntN(4) == 0 {
					c, ok = broadside.Fire(broadside.Side(1+rng.IntN(2))), true
				}
				if ok {
					b, err := broadside.EncodeCommand(c)
					if err != nil {
						t.Fatal(err)
					}
					sc[k] = append(sc[k], submission{v.Player, b, false})
				}
			}
		}
		for _, s := range sc[k] {
			if err := w.Submit(s.player, s.payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Step(); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// tap records the derivations the sim reports, per tick.
type tap struct {
	tick    uint64
	derived [][]lineage.Event // per tick (index tick-1)
}

func (r *tap) Command(lineage.EntityID, uint64) {}
func (r *tap) Derived(e, from lineage.EntityID) {
	r.derived[r.tick-1] = append(r.derived[r.tick-1], lineage.DerivedEvent(e, from))
}

// tee sends events to two recorders.
type tee struct{ a, b lineage.Recorder }

func (r tee) Command(e lineage.EntityID, pos uint64) { r.a.Command(e, pos); r.b.Command(e, pos) }
func (r tee) Derived(e, from lineage.EntityID)       { r.a.Derived(e, from); r.b.Derived(e, from) }

// run is a replayed match.
type run struct {
	// ships[k][p] is player p's ship after tick k+1 (zero if it was in
	// transit between sectors).
	ships [][]broadside.ShipView
	// pos[k][i] is the log position of sc[k][i] (0 if skipped).
	pos [][]uint64
	tap tap
}

// replayMatch replays sc without the command sc[skipTick][skipIdx] (none if
// skipTick < 0), recording lineage into lg if it is not nil (all sectors
// of the world as shard 0).
func replayMatch(t testing.TB, m *match, sc script, skipTick, skipIdx int, lg *lineage.Log) *run {
	t.Helper()
	ctx := context.Background()
	r := &run{ships: make([][]broadside.ShipView, len(sc)), pos: make([][]uint64, len(sc))}
	r.tap.derived = make([][]lineage.Event, len(sc))
	var rec lineage.Recorder = &r.tap
	if lg != nil {
		rec = tee{&r.tap, lg}
	}
	var input []replay.Command
	w := m.world(t, rec, func(in []replay.Command) { input = append(input[:0], in...) })
	for k, subs := range sc {
		n := 0
		for i, s := range subs {
			if k == skipTick && i == skipIdx {
				continue
			}
			if err := w.Submit(s.player, s.payload); err != nil {
				t.Fatal(err)
			}
			n++
		}
		tick := w.Tick() + 1
		r.tap.tick = tick
		if lg != nil {
			if err := lg.BeginTick(ctx, 0, tick); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Step(); err != nil {
			t.Fatal(err)
		}
		if lg != nil {
			for i := range input {
				lg.Input(lineage.CommandInfo{Pos: input[i].Pos, Player: input[i].Player, Kind: broadside.RecordKind(input[i])})
			}
			if err := lg.EndTick(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Player commands follow the tick's migrations, in submission
		// order.
		r.pos[k] = make([]uint64, len(subs))
		j := len(input) - n
		for i := range subs {
			if k == skipTick && i == skipIdx {
				continue
			}
			r.pos[k][i] = input[j].Pos
			j++
		}
		st := make([]broadside.ShipView, m.ships+1)
		ships(w, func(v broadside.ShipView) { st[v.Player] = v })
		r.ships[k] = st
	}
	return r
}

// recordBenchWorld plays the 1,000-ship benchmark world for ticks ticks
// (a BotMatch: its aggressive fleet keeps about 10,000 cannonballs in the
// air), recording its lineage (all sectors as shard 0), and returns the
// store.
func recordBenchWorld(tb testing.TB, ticks int) lineage.Store {
	tb.Helper()
	ctx := context.Background()
	lg := lineage.NewLog(lineage.LogOptions{})
	var input []replay.Command
	m, err := broadside.NewBotMatch(broadside.DefaultConfig(), 1000, 1, world.LocalConfig{
		// A plain Recorder, so that the ticks are bracketed here.
		Recorder: func(uint32) lineage.Recorder { return struct{ lineage.Recorder }{lg} },
		Observer: func(info replay.TickInfo) {
			if info.Shard == 0 { // every sector reads the whole input
				input = append(input[:0], info.Commands...)
			}
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	for k := 0; k < ticks; k++ {
		if err := lg.BeginTick(ctx, 0, m.World().Tick()+1); err != nil {
			tb.Fatal(err)
		}
		if err := m.Step(); err != nil {
			tb.Fatal(err)
		}
		for i := range input {
			lg.Input(lineage.CommandInfo{Pos: input[i].Pos, Player: input[i].Player, Kind: broadside.RecordKind(input[i])})
		}
		if err := lg.EndTick(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	if err := lg.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	return lg.Store()
}
