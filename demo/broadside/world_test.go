package broadside

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
	"github.com/anoptic/broadside/replay/world"
	"pgregory.net/rapid"
)

// testWorld is a test's world: cfg's sectors run by world.LocalWorld's
// Runners on an in-memory log, as every offline match runs, played by
// hand (newTestWorld) or by a BotMatch's fleet (newBotWorld). Its
// step takes the recorder of that tick and returns the tick's input.
type testWorld struct {
	*world.LocalWorld
	geo   *geometry
	match *BotMatch // nil: played by hand
	rec   lineage.Recorder
	input []replay.Command
}

// newTestWorld returns a world of cfg at tick 0 whose sectors' outputs
// (migrations) reach the log delay ticks late (world.LocalConfig's
// OutputDelay).
func newTestWorld(t testing.TB, cfg Config, delay int) *testWorld {
	t.Helper()
	w := &testWorld{}
	g, err := NewGame(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	lc := w.config(t, cfg, delay)
	lc.Game = g
	if w.LocalWorld, err = world.NewLocal(lc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// newBotWorld returns a world of cfg at tick 0 played by a BotMatch of
// ships bots seeded with seed (an aggressive Fleet: every Step, the bots
// give their orders first).
func newBotWorld(t testing.TB, cfg Config, ships int, seed uint64, delay int) *testWorld {
	t.Helper()
	w := &testWorld{}
	m, err := NewBotMatch(cfg, ships, seed, w.config(t, cfg, delay))
	if err != nil {
		t.Fatal(err)
	}
	w.match, w.LocalWorld = m, m.World()
	t.Cleanup(m.Close)
	return w
}

func (w *testWorld) config(t testing.TB, cfg Config, delay int) world.LocalConfig {
	geo, err := newGeometry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.geo = geo
	return world.LocalConfig{OutputDelay: delay,
		Recorder: func(uint32) lineage.Recorder { return w },
		Observer: func(info replay.TickInfo) {
			if info.Shard == 0 { // every sector reads the whole input
				w.input = append(w.input[:0], info.Commands...)
			}
		}}
}

// Command and Derived pass the sectors' lineage to the Step's recorder.
func (w *testWorld) Command(e lineage.EntityID, pos uint64) {
	if w.rec != nil {
		w.rec.Command(e, pos)
	}
}

func (w *testWorld) Derived(e, from lineage.EntityID) {
	if w.rec != nil {
		w.rec.Derived(e, from)
	}
}

// step plays the next tick (the bots' orders first, if bots play),
// reporting lineage to rec (nil: none), and returns the tick's input
// records (valid until the next Step).
func (w *testWorld) step(t testing.TB, rec lineage.Recorder) []replay.Command {
	t.Helper()
	w.rec, w.input = rec, w.input[:0]
	var err error
	if w.match != nil {
		err = w.match.Step()
	} else {
		err = w.LocalWorld.Step()
	}
	if err != nil {
		t.Fatal(err)
	}
	return w.input
}

// SubmitCommand submits a command of player for the next tick.
func (w *testWorld) SubmitCommand(t testing.TB, player uint32, c PlayerCommand) {
	t.Helper()
	b, err := EncodeCommand(c)
	if err == nil {
		err = w.Submit(player, b)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Sectors returns the world's sectors (use them between Steps).
func (w *testWorld) Sectors() []*Sector {
	out := make([]*Sector, w.Shards())
	for i := range out {
		out[i] = w.Sim(uint32(i)).(*Sector)
	}
	return out
}

// Hash combines the sectors' state hashes, in sector order.
func (w *testWorld) Hash() uint64 {
	h := uint64(w.Shards())
	for _, s := range w.Sectors() {
		h = table.Mix64(h ^ s.Hash())
	}
	return h
}

// Ships calls fn for every ship, sector by sector in slot order.
func (w *testWorld) Ships(fn func(ShipView)) {
	for _, s := range w.Sectors() {
		s.Ships(fn)
	}
}

// Balls calls fn for every cannonball, sector by sector in slot order.
func (w *testWorld) Balls(fn func(BallView)) {
	for _, s := range w.Sectors() {
		s.Balls(fn)
	}
}

// ShipCount and BallCount count what the sectors own (not what is in
// transit between them).
func (w *testWorld) ShipCount() (n int) {
	for _, s := range w.Sectors() {
		n += s.ShipCount()
	}
	return n
}

func (w *testWorld) BallCount() (n int) {
	for _, s := range w.Sectors() {
		n += s.BallCount()
	}
	return n
}

// ShipsInTransit returns the number of ships whose migration records no
// tick has taken as input yet.
func (w *testWorld) ShipsInTransit(t testing.TB) int {
	t.Helper()
	outs, err := w.InTransit()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range outs {
		if len(o) > 1 && o[1] == kindShip {
			n++
		}
	}
	return n
}

// checkHashes fails unless every sector's incremental hash equals its hash
// recomputed from scratch.
func checkHashes(t testing.TB, w *testWorld) {
	t.Helper()
	for _, s := range w.Sectors() {
		if h, r := s.Hash(), s.Tables().RecomputeHash(); h != r {
			t.Fatalf("tick %d sector %d: incremental hash %#x, recomputed %#x", w.Tick(), s.Index(), h, r)
		}
	}
}

type totals struct{ fired, sunk, migrated uint64 }

func worldTotals(w *testWorld) totals {
	var s totals
	for _, sec := range w.Sectors() {
		st := sec.Stats()
		s.fired += st.BallsFired
		s.sunk += st.Sunk
		s.migrated += st.Migrated
	}
	return s
}

// firedRecorder collects the ids of the cannonballs fired (a ball's
// derivation from the ship whose player its id names) and counts those
// fired twice.
type firedRecorder struct {
	fired map[lineage.EntityID]struct{}
	twice int
}

func (r *firedRecorder) Command(lineage.EntityID, uint64) {}
func (r *firedRecorder) Derived(e, from lineage.EntityID) {
	if uint64(e)>>56 != kindBall || uint64(e)>>24&(1<<32-1) != uint64(from)&(1<<32-1) {
		return
	}
	if _, dup := r.fired[e]; dup {
		r.twice++
	}
	r.fired[e] = struct{}{}
}

// TestDeterminism runs the same bot battle twice and requires identical
// world hashes at every tick, with hits, sinkings, respawns and migrations
// all happening; no two cannonballs of the battle get the same id.
func TestDeterminism(t *testing.T) {
	const ships, ticks = 200, 2500
	run := func() ([]uint64, *testWorld) {
		w := newBotWorld(t, Config{Seed: 42, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 12}, ships, 9, 0)
		rec := &firedRecorder{fired: map[lineage.EntityID]struct{}{}}
		hashes := make([]uint64, 0, ticks)
		for k := 0; k < ticks; k++ {
			w.step(t, rec)
			hashes = append(hashes, w.Hash())
			if k%500 == 0 {
				checkHashes(t, w)
			}
		}
		checkHashes(t, w)
		if n := uint64(len(rec.fired)); rec.twice != 0 || n != worldTotals(w).fired {
			t.Fatalf("%d ball ids fired twice; %d ids for %d balls fired", rec.twice, n, worldTotals(w).fired)
		}
		return hashes, w
	}
	a, w := run()
	b, _ := run()
	for k := range a {
		if a[k] != b[k] {
			t.Fatalf("tick %d: hash %#x vs %#x", k+1, a[k], b[k])
		}
	}
	tot := worldTotals(w)
	t.Logf("%d ticks: %d balls fired, %d sinkings, %d migrations", ticks, tot.fired, tot.sunk, tot.migrated)
	if tot.fired == 0 || tot.sunk < 10 || tot.migrated < 100 {
		t.Fatalf("battle too quiet to test determinism: %+v", tot)
	}
	respawned := 0
	w.Ships(func(v ShipView) {
		if !v.Sunk && v.Hull == MaxHull {
			respawned++
		}
	})
	if respawned == 0 {
		t.Fatal("no ship at full hull after thousands of ticks")
	}
}

// TestGoldenHash pins the hash of a short bot battle on a LocalWorld, and
// re-simulates its log to the same sector hashes. If the game rules, the
// bots or the log layout of a tick change on purpose, update the constant
// (recordings made before no longer verify); if it changes by accident,
// Step is not deterministic across builds or machines.
func TestGoldenHash(t *testing.T) {
	cfg := Config{Seed: 7, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 1, Islands: 5}
	w := newBotWorld(t, cfg, 40, 3, 0)
	for k := 0; k < 600; k++ {
		w.step(t, nil)
	}
	const golden uint64 = 0x80ed2ed5504e58e8
	if got := w.Hash(); got != golden {
		t.Fatalf("hash after 600 ticks = %#x, golden %#x", got, golden)
	}
	g, err := NewGame(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	hashes, _, err := world.Resimulate(context.Background(), g, 0, w.Entries(), 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range w.Sectors() {
		if h, ok := hashes[i].Get(600); !ok || h.Hash != s.Hash() {
			t.Fatalf("sector %d re-simulated to %+v (%v), live %#x", i, h, ok, s.Hash())
		}
	}
}

// crossingPlayer returns a player whose ship spawns at tick 1 in the
// western half of g heading east-ish, with no island in the way (worlds in
// these tests have none).
func crossingPlayer(t *testing.T, g *geometry) uint32 {
	for p := uint32(1); p < 10000; p++ {
		x, _, h := g.spawnPoint(p, 1)
		if x < g.w/2-200_000 && Cos(h) > One*9/10 {
			return p
		}
	}
	t.Fatal("no suitable player")
	return 0
}

func findShip(w *testWorld, player uint32) (ShipView, int) {
	var found ShipView
	n := 0
	w.Ships(func(v ShipView) {
		if v.Player == player {
			found = v
			n++
		}
	})
	return found, n
}

// TestMigrationKeepsState drives a ship across a sector border and compares
// it, tick by tick, with the same ship in a one-sector world: its state
// after migration is identical, it exists exactly once (or is in transit),
// and with a slow log the ship makes up its transit ticks on arrival.
func TestMigrationKeepsState(t *testing.T) {
	for _, delay := range []int{0, 3} {
		t.Run(fmt.Sprintf("delay=%d", delay), func(t *testing.T) {
			base := Config{Seed: 5, Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1}
			one := newTestWorld(t, base, 0)
			split := base
			split.SectorsX = 2
			two := newTestWorld(t, split, delay)
			p := crossingPlayer(t, two.geo)
			for _, w := range []*testWorld{one, two} {
				w.SubmitCommand(t, p, Join())
				w.step(t, nil)
				w.SubmitCommand(t, p, Throttle(100))
			}
			transitTicks, arrivedAt := 0, 0
			for k := 0; k < 3000 && arrivedAt == 0; k++ {
				one.step(t, nil)
				two.step(t, nil)
				want, _ := findShip(one, p)
				got, n := findShip(two, p)
				inTransit := two.ShipsInTransit(t)
				switch {
				case n+inTransit != 1:
					t.Fatalf("tick %d: ship in %d sectors and %d times in transit", two.Tick(), n, inTransit)
				case n == 0:
					transitTicks++
					continue
				}
				if got.Sector == 1 {
					arrivedAt = int(two.Tick())
				}
				got.Sector = want.Sector
				if got != want {
					t.Fatalf("tick %d: ship %+v, in one sector %+v", two.Tick(), got, want)
				}
			}
			if arrivedAt == 0 {
				t.Fatal("ship never crossed the border")
			}
			if transitTicks != delay+1 {
				t.Fatalf("ship in transit for %d ticks, want %d", transitTicks, delay+1)
			}
			if two.Sectors()[0].ShipCount() != 0 || two.Sectors()[1].ShipCount() != 1 {
				t.Fatal("ship not moved exactly once")
			}
		})
	}
}

// TestShipsConserved runs a battle across four sectors with a slow log and
// checks, every tick, that every joined player's ship is in exactly one
// sector or in transit.
func TestShipsConserved(t *testing.T) {
	const ships = 120
	w := newBotWorld(t, Config{Seed: 11, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 2, Islands: 6}, ships, 4, 2)
	seen := make([]int, ships+1)
	for k := 0; k < 1500; k++ {
		w.step(t, nil)
		inTransit := w.ShipsInTransit(t)
		if got := w.ShipCount() + inTransit; got != ships {
			t.Fatalf("tick %d: %d ships + %d in transit, want %d", w.Tick(), w.ShipCount(), inTransit, ships)
		}
		clear(seen)
		w.Ships(func(v ShipView) { seen[v.Player]++ })
		for p, n := range seen {
			if n > 1 {
				t.Fatalf("tick %d: player %d has %d ships", w.Tick(), p, n)
			}
		}
	}
	if worldTotals(w).migrated < 50 {
		t.Fatalf("too few migrations: %+v", worldTotals(w))
	}
}

// recorder keeps lineage events for assertions.
type recorder struct {
	commands [][2]uint64 // entity, pos
	derived  [][2]lineage.EntityID
}

func (r *recorder) Command(e lineage.EntityID, pos uint64) {
	r.commands = append(r.commands, [2]uint64{uint64(e), pos})
}
func (r *recorder) Derived(e, from lineage.EntityID) {
	r.derived = append(r.derived, [2]lineage.EntityID{e, from})
}

// TestCommandsInTransitApplied sends orders while the ship is between
// sectors (after the source's Output, before the migration record) and
// checks that the destination obeys them and credits them in lineage.
func TestCommandsInTransitApplied(t *testing.T) {
	w := newTestWorld(t, Config{Seed: 5, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 1}, 6)
	p := crossingPlayer(t, w.geo)
	w.SubmitCommand(t, p, Join())
	w.step(t, nil)
	w.SubmitCommand(t, p, Throttle(100))
	rec := &recorder{}
	var rudderPos, firePos uint64
	for k := 0; k < 3000; k++ {
		input := w.step(t, rec)
		for _, c := range input {
			if c.Player == p {
				switch pc, _ := DecodeCommand(c.Payload); pc.Kind {
				case KindRudder:
					rudderPos = c.Pos
				case KindFire:
					firePos = c.Pos
				}
			}
		}
		if _, n := findShip(w, p); n == 0 && rudderPos == 0 {
			// In transit: give orders now.
			w.SubmitCommand(t, p, Rudder(60))
			w.SubmitCommand(t, p, Fire(Port))
			rec.commands = rec.commands[:0]
		}
		if v, n := findShip(w, p); n == 1 && v.Sector == 1 {
			if v.Rudder != 60 {
				t.Fatalf("rudder %d after arrival, want 60", v.Rudder)
			}
			w.step(t, rec) // the pending broadside fires in the next tick the ship sails
			v, _ = findShip(w, p)
			if v.PortReload == 0 {
				t.Fatal("fire order given in transit was lost")
			}
			for _, want := range []uint64{rudderPos, firePos} {
				if !slices.Contains(rec.commands, [2]uint64{uint64(ShipID(p)), want}) {
					t.Fatalf("lineage lacks command at %d: %v", want, rec.commands)
				}
			}
			return
		}
	}
	t.Fatal("ship never arrived")
}

// placeShip moves player's ship (owned by s) for a test.
func placeShip(t *testing.T, s *Sector, player uint32, x, y int32, heading Angle) {
	t.Helper()
	ps, ok := s.playerSlots[player]
	if !ok {
		t.Fatalf("player %d unknown", player)
	}
	sh := int(s.players.Row(int(ps)).U32(plShipSlot)) - 1
	if sh < 0 {
		t.Fatalf("player %d has no ship in sector %d", player, s.index)
	}
	r := s.motion.Mut(sh)
	r.SetI32(mvX, x)
	r.SetI32(mvY, y)
	r.SetU16(mvHeading, heading)
	r.SetI32(mvSpeed, 0)
}

// TestCombat puts a target abeam of a shooter: broadsides damage it, sink
// it, and it respawns with a full hull; lineage links balls to the shooter
// and the target's damage to the balls.
func TestCombat(t *testing.T) {
	w := newTestWorld(t, Config{Seed: 3, Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1}, 0)
	const shooter, target = 1, 2
	w.SubmitCommand(t, shooter, Join())
	w.SubmitCommand(t, target, Join())
	w.step(t, nil)
	s := w.Sectors()[0]
	placeShip(t, s, shooter, 1_000_000, 900_000, 0) // heading east: port is north
	placeShip(t, s, target, 1_000_000, 1_000_000, 0)
	rec := &recorder{}
	hull := []int16{MaxHull}
	sunkAt := uint64(0)
	for k := 0; k < 2000; k++ {
		if v, _ := s.Ship(shooter); v.PortReload == 0 && sunkAt == 0 {
			w.SubmitCommand(t, shooter, Fire(Port))
		}
		w.step(t, rec)
		v, ok := s.Ship(target)
		if !ok {
			t.Fatal("target left the sector")
		}
		if sunkAt == 0 {
			if v.Hull < hull[len(hull)-1] {
				hull = append(hull, v.Hull)
			}
			if v.Sunk {
				sunkAt = w.Tick()
				if v.Hull != 0 || v.Speed != 0 {
					t.Fatalf("sunk ship: %+v", v)
				}
			}
			continue
		}
		if !v.Sunk {
			if w.Tick() != sunkAt+RespawnDelay || v.Hull != MaxHull {
				t.Fatalf("respawned at tick %d (sunk %d) with hull %d", w.Tick(), sunkAt, v.Hull)
			}
			break
		}
	}
	if sunkAt == 0 || len(hull) < 4 {
		t.Fatalf("target hull went %v, sunk at %d", hull, sunkAt)
	}
	if v, _ := s.Ship(target); v.Sunk {
		t.Fatal("target never respawned")
	}
	var fromShooter, hits int
	for _, d := range rec.derived {
		switch {
		case d[1] == ShipID(shooter) && uint64(d[0])>>56 == kindBall:
			fromShooter++
		case d[0] == ShipID(target) && uint64(d[1])>>56 == kindBall:
			hits++
		}
	}
	if fromShooter < Guns || hits < 3 {
		t.Fatalf("lineage: %d balls from the shooter, %d hits on the target", fromShooter, hits)
	}
	t.Logf("hull %v, sunk at tick %d, %d balls fired, %d hits", hull, sunkAt, fromShooter, hits)
}

// TestBroadsidesIndependent fires one ship's broadsides with and without
// another ship firing in the same sector (before it: the other ship has
// the lower slot): the first ship's cannonballs, ids, paths and flight
// times, are the same either way. Gunnery randomness and ball ids are
// keyed by the broadside, not drawn from a stream or a counter the sector
// shares, so lineage need not report a dependency between the two.
func TestBroadsidesIndependent(t *testing.T) {
	const a, b = 1, 2
	run := func(bFires bool) map[lineage.EntityID][]BallView {
		w := newTestWorld(t, Config{Seed: 3, Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1}, 0)
		w.SubmitCommand(t, b, Join())
		w.SubmitCommand(t, a, Join())
		w.step(t, nil)
		s := w.Sectors()[0]
		placeShip(t, s, a, 600_000, 1_000_000, 0) // 800 m apart, firing north and south
		placeShip(t, s, b, 1_400_000, 1_000_000, 0)
		balls := map[lineage.EntityID][]BallView{}
		for k := 0; k < 400; k++ {
			for _, p := range []uint32{b, a} {
				v, _ := s.Ship(p)
				switch {
				case p == b && !bFires:
				case v.PortReload == 0:
					w.SubmitCommand(t, p, Fire(Port))
				case v.StarboardReload == 0:
					w.SubmitCommand(t, p, Fire(Starboard))
				}
			}
			w.step(t, nil)
			w.Balls(func(v BallView) {
				if v.Owner == ShipID(a) {
					balls[v.ID] = append(balls[v.ID], v)
				}
			})
		}
		return balls
	}
	with, without := run(true), run(false)
	if len(with) < 5*Guns {
		t.Fatalf("only %d balls fired", len(with))
	}
	if !maps.EqualFunc(with, without, slices.Equal[[]BallView]) {
		t.Fatal("another ship's broadsides changed a ship's cannonballs")
	}
}

// TestHitsIndependentOfSlots plays the same duel of two shooters over two
// overlapping targets in two worlds whose players joined in opposite
// orders, so that ships and cannonballs sit in different table slots and
// are sailed, fired and flown in different orders: every ship and ball is
// the same at every tick, and so are the tick's derivations. It also
// checks that balls flying on through wrecks, and ships a ball would have
// reached had another not been in the way, are reported.
func TestHitsIndependentOfSlots(t *testing.T) {
	type tickState struct {
		ships   []ShipView
		balls   []BallView
		derived [][2]lineage.EntityID
	}
	run := func(players []uint32) ([]tickState, *recorder) {
		w := newTestWorld(t, Config{Seed: 9, Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1}, 0)
		for _, p := range players {
			w.SubmitCommand(t, p, Join())
		}
		w.step(t, nil)
		s := w.Sectors()[0]
		// The targets' hulls overlap, in one cell of the sector's grid.
		placeShip(t, s, 1, 980_000, 880_000, 0) // port guns north, at the targets
		placeShip(t, s, 2, 980_000, 1_120_000, 0)
		placeShip(t, s, 3, 970_000, 1_000_000, 0)
		placeShip(t, s, 4, 990_000, 1_000_000, 0)
		all := &recorder{}
		var out []tickState
		for k := 0; k < 700; k++ {
			for _, p := range []uint32{1, 2} {
				if v, _ := s.Ship(p); !v.Sunk && v.PortReload == 0 && p == 1 {
					w.SubmitCommand(t, p, Fire(Port))
				} else if !v.Sunk && v.StarboardReload == 0 && p == 2 {
					w.SubmitCommand(t, p, Fire(Starboard))
				}
			}
			rec := &recorder{}
			w.step(t, rec)
			st := tickState{ships: make([]ShipView, 5)}
			w.Ships(func(v ShipView) { st.ships[v.Player] = v })
			w.Balls(func(v BallView) { st.balls = append(st.balls, v) })
			slices.SortFunc(st.balls, func(a, b BallView) int { return cmp.Compare(a.ID, b.ID) })
			st.derived = rec.derived
			all.derived = append(all.derived, rec.derived...)
			out = append(out, st)
		}
		return out, all
	}
	a, rec := run([]uint32{1, 2, 3, 4})
	b, _ := run([]uint32{4, 3, 2, 1})
	for k := range a {
		sa, sb := &a[k], &b[k]
		// Broadsides are fired in slot order; hits are resolved in ball
		// order. Compare the firing as a set and the hits in order.
		fired := func(d [][2]lineage.EntityID) ([][2]lineage.EntityID, [][2]lineage.EntityID) {
			var f, h [][2]lineage.EntityID
			for _, e := range d {
				if uint64(e[0])>>56 == kindBall && uint64(e[1])>>56 == kindShip && uint64(e[0])>>24&(1<<32-1) == uint64(e[1])&(1<<32-1) {
					f = append(f, e)
				} else {
					h = append(h, e)
				}
			}
			slices.SortFunc(f, func(x, y [2]lineage.EntityID) int { return cmp.Compare(x[0], y[0]) })
			return f, h
		}
		fa, ha := fired(sa.derived)
		fb, hb := fired(sb.derived)
		if !slices.Equal(sa.ships, sb.ships) || !slices.Equal(sa.balls, sb.balls) || !slices.Equal(fa, fb) || !slices.Equal(ha, hb) {
			t.Fatalf("tick %d differs with players joined in another order:\n%+v\n%+v", k+2, sa, sb)
		}
	}
	var hits, wrecks, shields int
	d := rec.derived
	for i, e := range d {
		ballFromShip := uint64(e[0])>>56 == kindBall && uint64(e[1])>>56 == kindShip
		shipFromBall := uint64(e[0])>>56 == kindShip && uint64(e[1])>>56 == kindBall
		switch {
		case shipFromBall && i+1 < len(d) && d[i+1] == [2]lineage.EntityID{e[1], e[0]}:
			hits++
		case shipFromBall:
			shields++ // not hit: the ball ended in another ship before
		case ballFromShip && (i == 0 || d[i-1] != [2]lineage.EntityID{e[1], e[0]}) && uint64(e[0])>>24&(1<<32-1) != uint64(e[1])&(1<<32-1):
			wrecks++ // the ball flew on through a wreck
		}
	}
	t.Logf("%d hits, %d balls through wrecks, %d ships shielded", hits, wrecks, shields)
	if hits < 20 || wrecks == 0 || shields == 0 {
		t.Fatalf("%d hits, %d balls through wrecks, %d ships shielded: the duel tests too little", hits, wrecks, shields)
	}
}

// TestInvalidRecordsIgnored replays a battle's log with garbage records
// interleaved (malformed payloads, out-of-range values, engine records that
// are not migrations, migrations for impossible sectors, commands from
// unknown players, repeated joins) and requires the very same hashes.
func TestInvalidRecordsIgnored(t *testing.T) {
	cfg := Config{Seed: 8, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 1, Islands: 4}
	w := newBotWorld(t, cfg, 60, 2, 0)
	fresh := make([]*Sector, 2)
	for i := range fresh {
		var err error
		if fresh[i], err = NewSector(cfg, i); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var st shipState
	shipMig := appendShipMigration(nil, 0, 1, 5, &shipState{id: ShipID(3), player: 3, x: 1, y: 1, hull: 5})
	garbage := [][]byte{
		nil, {}, {0x11, 0}, {0x12}, {0x12, 101}, {0x12, 0x80}, {0x13, 0x9b}, {0x14, 0}, {0x14, 3},
		{0x15, 1}, {0x21, 1}, {0x01}, {0xff, 0xff, 0xff},
		appendShipMigration(nil, 0, 0, 5, &st),                                  // to itself
		appendShipMigration(nil, 0, 9, 5, &shipState{id: ShipID(3), player: 3}), // no such sector
		append(shipMig[:len(shipMig):len(shipMig)], 0),                          // trailing byte
		appendShipMigration(nil, 0, 1, 5, &shipState{id: ShipID(4), player: 3}), // wrong id
		appendBallMigration(nil, 1, 0, 5, &ballState{id: ballID(1, 1), owner: ShipID(2), lifetime: 500}),
	}
	for k := 0; k < 400; k++ {
		input := w.step(t, nil)
		var noisy []replay.Command
		for _, c := range input {
			for n := rng.IntN(3); n > 0; n-- {
				g := replay.Command{Pos: c.Pos, Player: uint32(rng.IntN(3)), Payload: garbage[rng.IntN(len(garbage))]}
				if rng.IntN(4) == 0 {
					g.Payload = make([]byte, rng.IntN(100))
					for i := range g.Payload {
						g.Payload[i] = byte(rng.Uint32())
					}
					var m migration
					if _, err := DecodeCommand(g.Payload); err == nil || decodeMigration(g.Payload, w.geo, &m) == nil {
						g.Payload = []byte{0xff} // a random valid record is not garbage
					}
				}
				noisy = append(noisy, g)
			}
			noisy = append(noisy, c)
			if rng.IntN(10) == 0 && w.Tick() > 1 {
				pc, _ := EncodeCommand(Throttle(50))
				noisy = append(noisy, replay.Command{Pos: c.Pos, Player: 1_000_000, Payload: pc}) // unknown player
				noisy = append(noisy, replay.Command{Pos: c.Pos, Player: uint32(1 + rng.IntN(60)), Payload: []byte{0x11}})
			}
		}
		for i, s := range fresh {
			s.Step(w.Tick(), noisy, lineage.Nop)
			if s.Hash() != w.Sectors()[i].Hash() {
				t.Fatalf("tick %d sector %d: garbage changed the hash", w.Tick(), i)
			}
		}
	}
}

// TestSnapshotReplay takes a full snapshot and two deltas of a running
// battle (through their binary encoding), restores fresh sectors from
// them, replays the log from there and requires the live hashes, tick by
// tick.
func TestSnapshotReplay(t *testing.T) {
	cfg := Config{Seed: 21, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 2, Islands: 6}
	w := newBotWorld(t, cfg, 150, 6, 0)
	n := len(w.Sectors())
	chains := make([][][]byte, n)
	var inputs [][]replay.Command
	hashes := map[uint64][]uint64{}
	const restoreTick = 260
	for k := 1; k <= 500; k++ {
		inputs = append(inputs, slices.Clone(w.step(t, nil)))
		var hs []uint64
		for i, s := range w.Sectors() {
			hs = append(hs, s.Hash())
			var c *table.SetCapture
			switch k {
			case 100:
				c = s.Tables().CaptureFull()
			case 101, 180, restoreTick:
				c = s.Tables().Capture()
			default:
				continue
			}
			b, err := c.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			chains[i] = append(chains[i], b)
		}
		hashes[uint64(k)] = hs
	}
	for i := 0; i < n; i++ {
		s, err := NewSector(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		caps := make([]*table.SetCapture, len(chains[i]))
		for k, b := range chains[i] {
			caps[k] = new(table.SetCapture)
			if err := caps[k].UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Tables().Restore(caps[0], caps[1:]...); err != nil {
			t.Fatal(err)
		}
		if err := s.Restored(); err != nil {
			t.Fatal(err)
		}
		if s.Tick() != restoreTick || s.Hash() != hashes[restoreTick][i] {
			t.Fatalf("sector %d restored at tick %d hash %#x, live %#x", i, s.Tick(), s.Hash(), hashes[restoreTick][i])
		}
		for tick := uint64(restoreTick + 1); tick <= 500; tick++ {
			s.Step(tick, inputs[tick-1], lineage.Nop)
			if s.Hash() != hashes[tick][i] {
				t.Fatalf("sector %d tick %d: replayed hash %#x, live %#x", i, tick, s.Hash(), hashes[tick][i])
			}
		}
	}
	full, _ := w.Sectors()[0].Tables().CaptureFull().MarshalBinary()
	t.Logf("sector 0 snapshot: full %d bytes; deltas %d, %d bytes", len(full), len(chains[0][2]), len(chains[0][3]))
}

// TestRestoredRejectsInconsistentState corrupts cross-references between
// the tables and expects Restored to refuse them.
func TestRestoredRejectsInconsistentState(t *testing.T) {
	w := newTestWorld(t, Config{Seed: 3, Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1}, 0)
	w.SubmitCommand(t, 1, Join())
	w.SubmitCommand(t, 2, Join())
	w.step(t, nil)
	s := w.Sectors()[0]
	if err := s.Restored(); err != nil {
		t.Fatalf("consistent state refused: %v", err)
	}
	s.ships.Mut(0).SetU32(shPlayerSlot, 1) // ship 0 claims player slot 1
	if err := s.Restored(); err == nil {
		t.Fatal("ship pointing at another player's slot accepted")
	}
}

func TestNewSectorRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Width: 100, Height: 2000, SectorsX: 1, SectorsY: 1},
		{Width: 2000, Height: 2000, SectorsX: 0, SectorsY: 1},
		{Width: 2000, Height: 2000, SectorsX: 5, SectorsY: 1},
		{Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1, Islands: -1},
		{Width: 2000, Height: 2000, SectorsX: 1, SectorsY: 1, MaxPlayers: -2},
	} {
		if _, err := NewSector(cfg, 0); err == nil {
			t.Errorf("NewSector(%+v) succeeded", cfg)
		}
	}
	if _, err := NewSector(DefaultConfig(), 4); err == nil {
		t.Error("NewSector accepted sector 4 of 4")
	}
}

func TestViewsAndIslands(t *testing.T) {
	w := newTestWorld(t, DefaultConfig(), 0)
	m, err := MapOf(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Islands) != DefaultConfig().Islands || !slices.Equal(m.Islands, w.Sectors()[3].Islands()) {
		t.Fatalf("%d islands, the map's differ from the sectors'", len(m.Islands))
	}
	if len(m.Sectors) != 4 || m.Width != DefaultConfig().Width*1000 || m.Height != DefaultConfig().Height*1000 {
		t.Fatalf("map %d × %d with %d sectors", m.Width, m.Height, len(m.Sectors))
	}
	for i, s := range w.Sectors() {
		if m.Sectors[i] != s.Bounds() {
			t.Fatalf("map's sector %d %+v, bounds %+v", i, m.Sectors[i], s.Bounds())
		}
	}
	for p := uint32(1); p <= 50; p++ {
		w.SubmitCommand(t, p, Join())
	}
	w.step(t, nil)
	var prev ShipView
	n := 0
	w.Ships(func(v ShipView) {
		if n > 0 && v.Sector == prev.Sector && v.Player <= prev.Player {
			t.Errorf("ships not in slot order: %d after %d", v.Player, prev.Player)
		}
		if !m.Sectors[v.Sector].Contains(int64(v.X), int64(v.Y)) {
			t.Errorf("ship %d spawned outside its sector", v.Player)
		}
		for _, is := range m.Islands {
			dx, dy := int64(v.X-is.X), int64(v.Y-is.Y)
			if dx*dx+dy*dy < int64(is.Radius)*int64(is.Radius) {
				t.Errorf("ship %d spawned on an island", v.Player)
			}
		}
		prev = v
		n++
	})
	if n != 50 {
		t.Fatalf("%d ships", n)
	}
	x, y := prev.Meters()
	if x != float64(prev.X)/1000 || y != float64(prev.Y)/1000 {
		t.Fatal("Meters")
	}
	var buf bytes.Buffer
	fmt.Fprint(&buf, Fire(Starboard), Throttle(-3))
	if buf.String() != "fire starboard throttle -3" {
		t.Fatalf("String: %q", buf.String())
	}
}

// TestPropReplayFromAnySnapshot records a battle with a capture after every
// tick (a full one every 40 ticks, deltas otherwise), then, for random
// sectors and ticks, restores the sector from the latest full capture and
// the deltas up to that tick and replays the log: the restored hash and
// every replayed hash equal the live ones.
func TestPropReplayFromAnySnapshot(t *testing.T) {
	cfg := Config{Seed: 33, Width: 2500, Height: 2500, SectorsX: 2, SectorsY: 1, Islands: 4}
	const ticks, fullEvery = 200, 40
	w := newBotWorld(t, cfg, 50, 5, 0)
	n := len(w.Sectors())
	captures := make([][][]byte, n) // [sector][tick-1]
	hashes := make([][]uint64, n)
	var inputs [][]replay.Command
	for k := 1; k <= ticks; k++ {
		inputs = append(inputs, slices.Clone(w.step(t, nil)))
		for i, s := range w.Sectors() {
			c := s.Tables().Capture()
			if k%fullEvery == 1 {
				c = s.Tables().CaptureFull()
			}
			b, err := c.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			captures[i] = append(captures[i], b)
			hashes[i] = append(hashes[i], s.Hash())
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		i := rapid.IntRange(0, n-1).Draw(rt, "sector")
		at := rapid.IntRange(1, ticks).Draw(rt, "tick")
		base := (at-1)/fullEvery*fullEvery + 1
		var chain []*table.SetCapture
		for k := base; k <= at; k++ {
			c := new(table.SetCapture)
			if err := c.UnmarshalBinary(captures[i][k-1]); err != nil {
				rt.Fatal(err)
			}
			chain = append(chain, c)
		}
		s, err := NewSector(cfg, i)
		if err != nil {
			rt.Fatal(err)
		}
		if err := s.Tables().Restore(chain[0], chain[1:]...); err != nil {
			rt.Fatal(err)
		}
		if err := s.Restored(); err != nil {
			rt.Fatal(err)
		}
		if s.Hash() != hashes[i][at-1] {
			rt.Fatalf("restored at tick %d: hash %#x, live %#x", at, s.Hash(), hashes[i][at-1])
		}
		end := min(ticks, at+rapid.IntRange(1, 60).Draw(rt, "replay"))
		for k := at + 1; k <= end; k++ {
			s.Step(uint64(k), inputs[k-1], lineage.Nop)
			if s.Hash() != hashes[i][k-1] {
				rt.Fatalf("restored at %d, replayed to %d: hash %#x, live %#x", at, k, s.Hash(), hashes[i][k-1])
			}
		}
	})
}
