// Package broadside is the sample game of the engine: a naval battle of
// sailing ships firing broadsides, deterministic to the bit, split into
// sectors that are independent simulation shards (replay.Sim).
//
// All game state lives in replay/table tables (so snapshots and state hashes
// come for free) and uses fixed-point arithmetic only (see fixed.go). Step
// uses no maps in iteration, no clock and no goroutines.
//
// # Dependencies are exactly what lineage is told
//
// An entity's state depends only on its own history and on the entities
// the sector reports it derived from (rec.Derived), never on a sector's
// bookkeeping, so that removing a command from the log changes only what
// lineage says the command influenced:
//
//   - randomness is drawn from a stream keyed by the event it decides (the
//     world seed, the tick, and the shooter and side of a broadside, or the
//     ball and ship of a hit), not from one stream per sector and tick
//     whose draws every earlier event would shift;
//   - entity ids name what the entity is (a ball: the ship that fired it,
//     the broadside and the gun), never a counter of the sector's;
//   - hits are resolved in the order of the balls' ids, and a ball meets
//     the ships its path touches in their order along the path (then by
//     id), never in the order of table slots, which depends on history;
//   - a hit is reported both ways (the ship's damage from the ball, the
//     ball's end from the ship); so is a ball flying on through a wreck
//     (the ball from the wreck, as it enters it) and a ship the ball would
//     have hit had another not been in the way (the ship from the ball).
//
// What remains unreported is what did not happen: a ball that would have
// hit a ship had the command not been there, but in this history fell
// into the sea or hit another ship at an earlier tick, leaves no trace to
// report (lineage records one history). So does a broadside the guns
// misfired because the sector was full of cannonballs (MaxBallsPerSector).
//
// # Sectors and migration
//
// Every sector receives every log record. Player commands (Player != 0) are
// decoded by DecodeCommand; engine records (Player == 0) are migrations. A
// ship or cannonball that leaves its sector is removed by the source sector,
// which returns its full state as a replay.Output; the engine appends that
// to the log, and the destination sector creates the entity when the record
// comes back as an input, in log order. A ship migrates when it is more than
// MigrationMargin past its sector's border (hysteresis); a cannonball
// migrates as soon as it crosses. A ball only hits ships of the sector it is
// in. On arrival a ship makes up the movement of the ticks it spent in
// transit (at most MaxCatchUp), and a ball's first hit test sweeps the path
// it flew in transit, so entities do not stall or tunnel at borders.
//
// # Commands and ownership
//
// A player's controls (throttle, rudder, last fire order, and the log
// position of each) are kept by every sector in its players table: every
// sector applies every command to it, in log order. The ship itself is
// steered by whichever sector owns it, reading those controls. So a command
// sent while its ship is in transit (after the source's Output, before the
// migration record's log position) is never lost: the destination already
// holds it when the ship arrives and obeys it from then on; a fire order not
// yet carried out by the source is carried out by the destination (a ship
// records the log position of the last fire order it handled). Lineage: the
// owning sector reports rec.Command(ship, pos) when it applies a command,
// and the destination reports, on arrival, the commands the ship had not yet
// been credited with, plus the migration record itself.
package broadside

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// Table ids and record layouts (byte offsets, little-endian). State that
// changes every tick (ship motion) is kept apart from state that changes
// rarely (the rest of a ship), and records that change at random (players'
// controls, ships' hulls) are in small pages, so that a capture taken every
// tick or few ticks copies little more than what changed.
const (
	metaTableID   = 1
	playerTableID = 2
	shipTableID   = 3
	ballTableID   = 4
	motionTableID = 5

	metaSize       = 40
	metaTick       = 0  // u64: the tick of the last Step
	metaBallSerial = 8  // u64: balls fired in this sector (a statistic; ball ids do not depend on it)
	metaSunk       = 16 // u64: ships sunk in this sector
	metaMigrated   = 24 // u64: entities that left this sector
	metaLastPos    = 32 // u64: the highest log position applied

	playerSize    = 40
	playerPage    = 4
	plPlayer      = 0  // u32 player id
	plFireSide    = 4  // u8 Side of the last fire order
	plThrottle    = 5  // i8 percent
	plRudder      = 6  // i8 percent
	plShipSlot    = 8  // u32: ship slot + 1 in this sector, 0 if elsewhere
	plThrottlePos = 16 // u64 log position of the last throttle order
	plRudderPos   = 24 // u64 log position of the last rudder order
	plFirePos     = 32 // u64 log position of the last fire order

	// ships: identity, hull and guns (slot i of motion is the same ship).
	shipSize      = 56
	shipPage      = 8
	shID          = 0  // u64 entity id
	shPlayer      = 8  // u32
	shPlayerSlot  = 12 // u32 slot in the players table
	shHull        = 16 // i16
	shSunk        = 18 // u8
	shPortReady   = 24 // u64 tick the port guns are loaded
	shStbdReady   = 32 // u64 tick the starboard guns are loaded
	shRespawnAt   = 40 // u64 tick a sunk ship respawns
	shFireHandled = 48 // u64 log position of the last fire order handled

	// motion: a ship's position and way, rewritten every tick it moves.
	motionSize = 16
	mvX        = 0  // i32 mm
	mvY        = 4  // i32 mm
	mvSpeed    = 8  // i32 mm/tick
	mvHeading  = 12 // u16 binary angle

	ballSize   = 64
	blID       = 0  // u64 entity id
	blOwner    = 8  // u64 firing ship's entity id
	blX0       = 16 // i32 mm, position at spawn tick
	blY0       = 20 // i32
	blVX       = 24 // i32 mm/tick
	blVY       = 28 // i32
	blSpawn    = 32 // u64 tick fired
	blLifetime = 40 // u32 ticks of flight
	blDeparted = 48 // u64 tick it left its previous sector (0: fired here)
	blArrived  = 56 // u64 tick it arrived here
)

// Sector is one sim shard of a world: it owns the ships and cannonballs
// inside its rectangle. It implements replay.Sim and replay.TableSim.
type Sector struct {
	geo    *geometry
	index  int
	bounds Rect
	// owned is bounds extended by MigrationMargin: ships leave only
	// beyond it.
	owned Rect

	meta, players, ships, motion, balls *table.Table
	set                                 *table.Set
	// playerSlots maps player ids to their slot in the players table. It
	// is derived from the table (rebuilt by Restored) and only looked up,
	// never iterated.
	playerSlots map[uint32]int32

	grid *grid
	tick uint64
	hash uint64

	// Scratch of flyBalls, reused every tick.
	flights []flight
	touches []pathTouch
	// hot caches, per ball slot, what flyBalls reads every tick; derived
	// from the balls table (written with each ball, rebuilt by Restored).
	hot []ballHot
	// sleep holds the balls flyBalls need not visit (sleep.go).
	sleep sleeper
	// sleepCheck, if set (tests), runs in Step between prepareSleep and
	// flyBalls.
	sleepCheck func()
	// islands lists the islands whose box meets the sector's rectangle:
	// the only ones a point of the sector may be inside.
	islands []int32
	// offshore, per ship slot, is a fine cell (as positions) in which no
	// point may be near an island (grid.mayBeNearIsland is false
	// throughout): the sector's geometry, whichever ship is in the slot.
	offshore []keepRect

	outBuf  []byte
	outEnds []int
	mig     migration
}

var (
	_ replay.Sim      = (*Sector)(nil)
	_ replay.TableSim = (*Sector)(nil)
)

// NewSector returns sector index (row-major in the SectorsX × SectorsY
// grid) of the world described by cfg, empty at tick 0.
func NewSector(cfg Config, index int) (*Sector, error) {
	geo, err := newGeometry(cfg)
	if err != nil {
		return nil, err
	}
	return newSector(geo, index)
}

func newSector(geo *geometry, index int) (*Sector, error) {
	if index < 0 || index >= geo.cfg.Sectors() {
		return nil, fmt.Errorf("broadside: sector %d of %d", index, geo.cfg.Sectors())
	}
	s := &Sector{geo: geo, index: index, bounds: geo.bounds(index), playerSlots: map[uint32]int32{}}
	s.owned = Rect{s.bounds.X0 - MigrationMargin, s.bounds.Y0 - MigrationMargin, s.bounds.X1 + MigrationMargin, s.bounds.Y1 + MigrationMargin}
	var err error
	mk := func(id uint32, size int, opts table.Options) *table.Table {
		if err == nil {
			var t *table.Table
			t, err = table.New(id, size, opts)
			return t
		}
		return nil
	}
	s.meta = mk(metaTableID, metaSize, table.Options{MaxRecords: 1})
	s.players = mk(playerTableID, playerSize, table.Options{MaxRecords: geo.cfg.MaxPlayers, RecordsPerPage: playerPage})
	s.ships = mk(shipTableID, shipSize, table.Options{MaxRecords: geo.cfg.MaxPlayers, RecordsPerPage: shipPage})
	s.motion = mk(motionTableID, motionSize, table.Options{MaxRecords: geo.cfg.MaxPlayers})
	// Balls live in cohorts (a broadside's balls are fired together and
	// fall together): next-fit keeps each cohort on few pages, so a tick's
	// firing and falling dirty few pages.
	s.balls = mk(ballTableID, ballSize, table.Options{MaxRecords: geo.cfg.MaxBallsPerSector, Policy: table.NextFit, RecordsPerPage: 16})
	if err != nil {
		return nil, err
	}
	if s.set, err = table.NewSet(s.meta, s.players, s.ships, s.motion, s.balls); err != nil {
		return nil, err
	}
	if _, err := s.meta.Alloc(); err != nil {
		return nil, err
	}
	s.grid = newGrid(s.bounds, MigrationMargin+ShipRadius, geo.islands)
	for k, is := range geo.islands {
		b, r := s.bounds, int64(is.Radius)
		if int64(is.X)+r >= int64(b.X0) && int64(is.X)-r < int64(b.X1) && int64(is.Y)+r >= int64(b.Y0) && int64(is.Y)-r < int64(b.Y1) {
			s.islands = append(s.islands, int32(k))
		}
	}
	s.hash = s.set.Hash()
	return s, nil
}

// Index returns the sector's index.
func (s *Sector) Index() int { return s.index }

// Bounds returns the sector's rectangle.
func (s *Sector) Bounds() Rect { return s.bounds }

// Tick returns the tick of the last Step.
func (s *Sector) Tick() uint64 { return s.tick }

// Hash returns the state hash after the last Step (or restore).
func (s *Sector) Hash() uint64 { return s.hash }

// Tables returns the sector's state tables (replay.TableSim).
func (s *Sector) Tables() *table.Set { return s.set }

// Islands returns the world's islands.
func (s *Sector) Islands() []Island { return append([]Island(nil), s.geo.islands...) }

// Step advances the sector by one tick (replay.Sim): it applies the tick's
// records in log order, sails the ships, fires, flies the cannonballs and
// resolves hits, and returns the migrations of entities that left.
func (s *Sector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	if rec == nil {
		rec = lineage.Nop
	}
	s.tick = tick
	s.meta.Mut(0).SetU64(metaTick, tick)
	s.outBuf, s.outEnds = s.outBuf[:0], s.outEnds[:0]

	for i := range cmds {
		c := &cmds[i]
		if c.Player == 0 {
			s.applyMigration(c, rec)
		} else {
			s.applyCommand(c, rec)
		}
	}
	if n := len(cmds); n > 0 {
		s.meta.Mut(0).SetU64(metaLastPos, cmds[n-1].Pos)
	}
	s.sailShips(rec) // and buckets the ships in the grid
	s.prepareSleep()
	if s.sleepCheck != nil {
		s.sleepCheck()
	}
	s.flyBalls(rec)
	s.hash = s.set.Hash()
	return s.outputs()
}

// applyCommand applies a player command. Commands of unknown players and
// invalid payloads are ignored.
func (s *Sector) applyCommand(c *replay.Command, rec lineage.Recorder) {
	pc, err := DecodeCommand(c.Payload)
	if err != nil {
		return
	}
	if pc.Kind == KindJoin {
		s.join(c, rec)
		return
	}
	ps, ok := s.playerSlots[c.Player]
	if !ok {
		return
	}
	p := s.players.Mut(int(ps))
	switch pc.Kind {
	case KindThrottle:
		p.SetI8(plThrottle, pc.Value)
		p.SetU64(plThrottlePos, c.Pos)
	case KindRudder:
		p.SetI8(plRudder, pc.Value)
		p.SetU64(plRudderPos, c.Pos)
	case KindFire:
		p.SetU8(plFireSide, uint8(pc.Side))
		p.SetU64(plFirePos, c.Pos)
	}
	if p.U32(plShipSlot) != 0 {
		rec.Command(ShipID(c.Player), c.Pos)
	}
}

// join registers a new player in every sector; the sector containing the
// spawn point creates the ship.
func (s *Sector) join(c *replay.Command, rec lineage.Recorder) {
	if _, ok := s.playerSlots[c.Player]; ok {
		return
	}
	ps, err := s.players.Alloc()
	if err != nil {
		return // MaxPlayers reached: every sector ignores the join alike
	}
	s.players.Mut(ps).SetU32(plPlayer, c.Player)
	s.playerSlots[c.Player] = int32(ps)
	x, y, heading := s.geo.spawnPoint(c.Player, s.tick)
	if s.geo.sectorAt(int64(x), int64(y)) != s.index {
		return
	}
	st := shipState{
		id: ShipID(c.Player), player: c.Player, x: x, y: y, heading: heading, hull: MaxHull,
		portReady: s.tick, stbdReady: s.tick,
	}
	if sh := s.addShip(&st, ps); sh >= 0 {
		rec.Command(st.id, c.Pos)
	}
}

// addShip creates a ship from st for the player in slot ps, returning its
// slot (or -1 if the player already has a ship here).
func (s *Sector) addShip(st *shipState, ps int) int {
	p := s.players.Row(ps)
	if p.U32(plShipSlot) != 0 {
		return -1
	}
	i, err := s.ships.Alloc()
	if err != nil {
		return -1 // cannot happen: ships ≤ players
	}
	// ships and motion allocate in lockstep (same policy, same calls).
	if m, err := s.motion.Alloc(); err != nil || m != i {
		panic(fmt.Sprintf("broadside: ship slot %d but motion slot %d (%v)", i, m, err))
	}
	s.writeShip(i, st, ps)
	s.players.Mut(ps).SetU32(plShipSlot, uint32(i)+1)
	return i
}

func (s *Sector) writeShip(i int, st *shipState, ps int) {
	r := s.ships.Mut(i)
	r.SetU64(shID, uint64(st.id))
	r.SetU32(shPlayer, st.player)
	r.SetU32(shPlayerSlot, uint32(ps))
	r.SetI16(shHull, st.hull)
	var sunk uint8
	if st.sunk {
		sunk = 1
	}
	r.SetU8(shSunk, sunk)
	r.SetU64(shPortReady, st.portReady)
	r.SetU64(shStbdReady, st.stbdReady)
	r.SetU64(shRespawnAt, st.respawnAt)
	r.SetU64(shFireHandled, st.fireHandledPos)
	m := s.motion.Mut(i)
	m.SetI32(mvX, st.x)
	m.SetI32(mvY, st.y)
	m.SetI32(mvSpeed, st.speed)
	m.SetU16(mvHeading, st.heading)
}

func (s *Sector) readShip(i int, st *shipState) {
	r, m := s.ships.Row(i), s.motion.Row(i)
	*st = shipState{
		id:             lineage.EntityID(r.U64(shID)),
		player:         r.U32(shPlayer),
		x:              m.I32(mvX),
		y:              m.I32(mvY),
		speed:          m.I32(mvSpeed),
		heading:        m.U16(mvHeading),
		hull:           r.I16(shHull),
		sunk:           r.U8(shSunk) != 0,
		portReady:      r.U64(shPortReady),
		stbdReady:      r.U64(shStbdReady),
		respawnAt:      r.U64(shRespawnAt),
		fireHandledPos: r.U64(shFireHandled),
		appliedThrough: s.meta.Row(0).U64(metaLastPos),
	}
}

// applyMigration creates the entity of a migration addressed to this
// sector. Invalid records, records for other sectors and duplicates are
// ignored.
func (s *Sector) applyMigration(c *replay.Command, rec lineage.Recorder) {
	m := &s.mig
	if decodeMigration(c.Payload, s.geo, m) != nil || m.to != s.index {
		return
	}
	switch m.kind {
	case kindShip:
		ps, ok := s.playerSlots[m.ship.player]
		if !ok {
			return
		}
		i := s.addShip(&m.ship, int(ps))
		if i < 0 {
			return
		}
		rec.Command(m.ship.id, c.Pos)
		// Credit the commands the ship missed in transit; its controls
		// are already in the players table.
		p := s.players.Row(int(ps))
		for _, off := range [...]int{plThrottlePos, plRudderPos, plFirePos} {
			if pos := p.U64(off); pos > m.ship.appliedThrough {
				rec.Command(m.ship.id, pos)
			}
		}
		// Make up the movement of the ticks in transit.
		if !m.ship.sunk && s.tick > m.departed+1 {
			for k := min(s.tick-m.departed-1, MaxCatchUp); k > 0; k-- {
				s.moveShip(i)
			}
		}
	case kindBall:
		i, err := s.balls.Alloc()
		if err != nil {
			return
		}
		b, r := &m.ball, s.balls.Mut(i)
		r.SetU64(blID, uint64(b.id))
		r.SetU64(blOwner, uint64(b.owner))
		r.SetI32(blX0, b.x0)
		r.SetI32(blY0, b.y0)
		r.SetI32(blVX, b.vx)
		r.SetI32(blVY, b.vy)
		r.SetU64(blSpawn, b.spawnTick)
		r.SetU32(blLifetime, b.lifetime)
		r.SetU64(blDeparted, m.departed)
		r.SetU64(blArrived, s.tick)
		rec.Command(b.id, c.Pos)
		s.cacheBall(i, -1)
	}
}

// sailShips runs every ship's tick: respawn, fire, move, migrate. Then
// it buckets the ship in the grid for the cannonballs' hit tests, where
// it stands after its tick (a ship's tick moves no other ship, so the
// grid is the one of all ships after theirs): those afloat, which balls
// hit, and the wrecks, which balls fly through (the flight then depends
// on the wreck having sunk, which lineage is told).
func (s *Sector) sailShips(rec lineage.Recorder) {
	s.grid.begin()
	defer s.grid.end()
	// In an epoch's later ticks every ship put is checked against its
	// anchor (prepareSleep anchors anew those that left it).
	z := &s.sleep
	z.drifted = z.drifted[:0]
	chk := z.continues(s.tick)
	for i := s.ships.NextLive(0); i >= 0; i = s.ships.NextLive(i + 1) {
		r := s.ships.Row(i)
		_ = r[shipSize-1] // the reads below without bounds checks
		if r[shSunk] != 0 {
			if s.tick >= r.U64(shRespawnAt) {
				s.respawn(i)
			}
			if s.ships.Live(i) { // not migrated on respawning
				x, y, id := s.addToGrid(i)
				if chk {
					z.check(i, id, x, y)
				}
			}
			continue
		}
		p := s.players.Row(int(binary.LittleEndian.Uint32(r[shPlayerSlot:])))
		_ = p[playerSize-1]
		if firePos := binary.LittleEndian.Uint64(p[plFirePos:]); firePos > binary.LittleEndian.Uint64(r[shFireHandled:]) {
			side := Side(p[plFireSide])
			readyAt := shPortReady
			if side == Starboard {
				readyAt = shStbdReady
			}
			if r.U64(readyAt) <= s.tick {
				w := s.ships.Mut(i)
				w.SetU64(readyAt, s.tick+Reload)
				w.SetU64(shFireHandled, firePos)
				s.fire(i, side, rec)
			}
			// Not loaded yet: the order stays pending until it is.
		}
		x, y := s.moveShipBy(i, p)
		if o := &s.owned; x < o.X0 || x >= o.X1 || y < o.Y0 || y >= o.Y1 {
			s.emigrateShip(i, s.geo.sectorAt(int64(x), int64(y)))
			continue
		}
		id := binary.LittleEndian.Uint64(r[shID:])
		if g := s.grid; g.putKept(i, x, y, id) {
			g.order = append(g.order, int32(i))
		} else {
			g.put(i, x, y, id, false) // afloat: only flyBalls sinks
		}
		if chk {
			z.check(i, id, x, y)
		}
	}
}

// moveShip applies one tick of the player's controls to ship i: speed,
// heading, position, groundings and the edge of the world.
func (s *Sector) moveShip(i int) {
	s.moveShipBy(i, s.players.Row(int(s.ships.Row(i).U32(shPlayerSlot))))
}

// moveShipBy is moveShip with the ship's player record p, and returns the
// ship's position after the move.
func (s *Sector) moveShipBy(i int, p table.Record) (int32, int32) {
	// The motion record in two words (position; speed and heading, and
	// the two bytes after them, kept as they are), the controls in one.
	r := s.motion.Row(i)
	_ = r[motionSize-1]
	pos, way := binary.LittleEndian.Uint64(r[mvX:]), binary.LittleEndian.Uint64(r[mvSpeed:])
	x, y := int32(uint32(pos)), int32(uint32(pos>>32))
	speed0, heading0 := int32(uint32(way)), uint16(way>>32)
	ctl := binary.LittleEndian.Uint16(p[plThrottle:])
	throttle, rudder := int32(int8(ctl)), int32(int8(ctl>>8))
	speed, heading := speed0, heading0

	target := throttle * MaxSpeed / 100
	if throttle < 0 {
		target = throttle * MaxReverse / 100
	}
	switch {
	case speed < target:
		speed = min(speed+Accel, target)
	case speed > target:
		speed = max(speed-Accel, target)
	}
	steer := max(speed, -speed, MaxSpeed/4)
	turn := rudder * MaxTurn * steer / (100 * MaxSpeed)
	if speed < 0 {
		turn = -turn
	}
	heading += Angle(int16(turn))
	nx := int64(x) + int64(mulQ16(speed, Cos(heading)))
	ny := int64(y) + int64(mulQ16(speed, Sin(heading)))

	for _, k := range s.islandsNear(i, nx, ny) {
		is := &s.geo.islands[k]
		dx, dy := nx-int64(is.X), ny-int64(is.Y)
		rr := int64(is.Radius) + ShipRadius
		if d2 := dx*dx + dy*dy; d2 < rr*rr {
			// Aground: pushed back to the shore, scraping speed off.
			d := int64(isqrt(uint64(d2)))
			if d == 0 {
				dx, d = 1, 1
			}
			nx, ny = int64(is.X)+dx*rr/d, int64(is.Y)+dy*rr/d
			speed = speed * 3 / 4
		}
	}
	nx = min(max(nx, ShipRadius), int64(s.geo.w)-ShipRadius)
	ny = min(max(ny, ShipRadius), int64(s.geo.h)-ShipRadius)

	if speed == speed0 && heading == heading0 && int32(nx) == x && int32(ny) == y {
		return x, y // nothing changed: no write, nothing to hash or capture
	}
	w := s.motion.Mut(i)
	_ = w[motionSize-1]
	binary.LittleEndian.PutUint64(w[mvX:], uint64(uint32(int32(nx)))|uint64(uint32(int32(ny)))<<32)
	binary.LittleEndian.PutUint64(w[mvSpeed:], uint64(uint32(speed))|uint64(heading)<<32|way&^(1<<48-1))
	return int32(nx), int32(ny)
}

// The motion record's words as moveShipBy reads and writes them, and the
// controls' bytes.
var (
	_ [mvY - mvX - 4]struct{}
	_ [4 - (mvY - mvX)]struct{}
	_ [mvHeading - mvSpeed - 4]struct{}
	_ [4 - (mvHeading - mvSpeed)]struct{}
	_ [mvSpeed - 8]struct{}
	_ [8 - mvSpeed]struct{}
	_ [plRudder - plThrottle - 1]struct{}
	_ [1 - (plRudder - plThrottle)]struct{}
)

// islandsNear returns the islands ship i at (x, y) may be aground on
// (grid.islandsNear), none if the grid's bits rule every one out. A fine
// cell whose bit rules them out is kept per ship slot (s.offshore), so a
// ship that stays in it, most ticks, is not located again.
func (s *Sector) islandsNear(i int, x, y int64) []int32 {
	if i < len(s.offshore) && s.offshore[i].holds(x, y) {
		return nil
	}
	if !s.grid.mayBeNearIsland(x, y) {
		for i >= len(s.offshore) {
			s.offshore = append(s.offshore, keepRect{})
		}
		s.offshore[i] = s.grid.fineRect(x, y)
		return nil
	}
	return s.grid.islandsNear(x, y)
}

// Keys of the random streams Step draws from (the world's layout draws its
// own: islands and spawn points).
const (
	rngBroadside = 0xb40_ad51_de
	rngHit       = 0x417_da3a9e
)

// fire launches a broadside of Guns cannonballs from ship i. Its spread is
// drawn from a stream keyed by the shooter, the side and the tick, and its
// balls' ids name the shooter, the broadside and the gun: neither depends
// on anything else that happens in the sector.
func (s *Sector) fire(i int, side Side, rec lineage.Recorder) {
	sh := s.ships.Row(i)
	owner, player := sh.U64(shID), sh.U32(shPlayer)
	rng := newRNG(s.geo.cfg.Seed, rngBroadside, owner, s.tick, uint64(side))
	r := s.motion.Row(i)
	x, y, speed, heading := r.I32(mvX), r.I32(mvY), r.I32(mvSpeed), r.U16(mvHeading)
	out := heading + Deg90
	if side == Starboard {
		out = heading - Deg90
	}
	cosH, sinH, cosO, sinO := Cos(heading), Sin(heading), Cos(out), Sin(out)
	shipVX, shipVY := mulQ16(speed, cosH), mulQ16(speed, sinH)
	fired := uint64(0)
	for g := int32(0); g < Guns; g++ {
		along := -GunSpan/2 + g*GunSpan/(Guns-1)
		bx := x + mulQ16(along, cosH) + mulQ16(GunAbeam, cosO)
		by := y + mulQ16(along, sinH) + mulQ16(GunAbeam, sinO)
		aim := out + Angle(int16(rng.between(-200, 200))) // ±1.1°
		v := BallSpeed + rng.between(-150, 150)
		lifetime := uint32(BallLifetime + rng.between(-5, 5))
		b, err := s.balls.Alloc()
		if err != nil {
			break // the sector is full of cannonballs: the guns misfire
		}
		fired++
		id := broadsideBallID(player, s.tick, side, g)
		w := s.balls.Mut(b)
		w.SetU64(blID, uint64(id))
		w.SetU64(blOwner, owner)
		w.SetI32(blX0, bx)
		w.SetI32(blY0, by)
		w.SetI32(blVX, mulQ16(v, Cos(aim))+shipVX)
		w.SetI32(blVY, mulQ16(v, Sin(aim))+shipVY)
		w.SetU64(blSpawn, s.tick)
		w.SetU32(blLifetime, lifetime)
		s.cacheBall(b, int32(i))
		rec.Derived(id, lineage.EntityID(owner))
	}
	if fired > 0 { // the serial counts the balls fired, once a broadside
		m := s.meta.Mut(0)
		m.SetU64(metaBallSerial, m.U64(metaBallSerial)+fired)
	}
}

// respawn brings sunk ship i back at its spawn point for this tick; if that
// point is in another sector, the ship migrates there.
func (s *Sector) respawn(i int) {
	r := s.ships.Row(i)
	player := r.U32(shPlayer)
	x, y, heading := s.geo.spawnPoint(player, s.tick)
	p := s.players.Row(int(r.U32(shPlayerSlot)))
	mv := s.motion.Mut(i)
	mv.SetI32(mvX, x)
	mv.SetI32(mvY, y)
	mv.SetU16(mvHeading, heading)
	mv.SetI32(mvSpeed, 0)
	w := s.ships.Mut(i)
	w.SetI16(shHull, MaxHull)
	w.SetU8(shSunk, 0)
	w.SetU64(shRespawnAt, 0)
	w.SetU64(shPortReady, s.tick)
	w.SetU64(shStbdReady, s.tick)
	w.SetU64(shFireHandled, p.U64(plFirePos)) // orders given while sunk are void
	if to := s.geo.sectorAt(int64(x), int64(y)); to != s.index {
		s.emigrateShip(i, to)
	}
}

// emigrateShip removes ship i and emits its migration to sector to.
func (s *Sector) emigrateShip(i, to int) {
	var st shipState
	s.readShip(i, &st)
	ps := int(s.ships.Row(i).U32(shPlayerSlot))
	s.players.Mut(ps).SetU32(plShipSlot, 0)
	s.ships.Free(i)
	s.motion.Free(i)
	s.bumpMigrated()
	s.outBuf = appendShipMigration(s.outBuf, s.index, to, s.tick, &st)
	s.outEnds = append(s.outEnds, len(s.outBuf))
}

func (s *Sector) bumpMigrated() {
	m := s.meta.Mut(0)
	m.SetU64(metaMigrated, m.U64(metaMigrated)+1)
}

// addToGrid buckets ship i in the grid as it stands, and returns its
// position and id.
func (s *Sector) addToGrid(i int) (x, y int32, id uint64) {
	r, m := s.ships.Row(i), s.motion.Row(i)
	x, y, id = m.I32(mvX), m.I32(mvY), r.U64(shID)
	s.grid.put(i, x, y, id, r.U8(shSunk) != 0)
	return x, y, id
}

// ballAt returns ball r's position at tick t.
func ballAt(r table.Record, t uint64) (int64, int64) {
	age := int64(t - r.U64(blSpawn))
	return int64(r.I32(blX0)) + int64(r.I32(blVX))*age, int64(r.I32(blY0)) + int64(r.I32(blVY))*age
}

// ballHot is a cannonball's flight as flyBalls reads it every tick, and
// the ticks quiet..last over which the general tests are known to pass:
// it is in flight (not past its lifetime), in the world, in this sector,
// off every island (the grid's island bits are clear under it), and its
// hit test sweeps one tick from where the previous one ended (after the
// tick it was fired or arrived). Those tests depend only on the ball's
// record, the tick and the sector's fixed geometry, so over quiet..last
// flyBalls tests only for ships, with the same outcome.
type ballHot struct {
	x0, y0, vx, vy int32
	spawn          uint64
	quiet, last    uint64
	// owner is the firing ship's id and ownerSlot its ship slot when it
	// fired (-1: unknown), to find it in the grid: touching skips it, so
	// the prefilters may too.
	owner     uint64
	ownerSlot int32
	// born says the ball was fired here and the general tests pass at its
	// spawn tick too, whose hit test is of the gun's position alone.
	born bool
	// noSleepTo is the last tick at which trySleep does not try the ball
	// (a ball found next to a ship stays so for a few ticks; not state).
	noSleepTo uint64
}

// cacheBall fills hot[i] from ball i's record; ownerSlot is the ship slot
// of its owner, if known (-1 otherwise).
func (s *Sector) cacheBall(i int, ownerSlot int32) {
	if i >= len(s.hot) {
		s.hot = append(s.hot, make([]ballHot, max(i+1, s.balls.Slots())-len(s.hot))...)
	}
	s.sleep.awaken(i)
	r := s.balls.Row(i)
	h := &s.hot[i]
	*h = ballHot{x0: r.I32(blX0), y0: r.I32(blY0), vx: r.I32(blVX), vy: r.I32(blVY), spawn: r.U64(blSpawn),
		owner: r.U64(blOwner), ownerSlot: ownerSlot}
	h.quiet = h.spawn + 1
	if r.U64(blDeparted) != 0 {
		h.quiet = max(h.quiet, r.U64(blArrived)+1)
	}
	end := h.spawn + uint64(r.U32(blLifetime))
	h.last = h.quiet - 1
	// In the world and in the sector: in their intersection, a box.
	x0, x1 := max(0, int64(s.bounds.X0)), min(int64(s.geo.w), int64(s.bounds.X1))
	y0, y1 := max(0, int64(s.bounds.Y0)), min(int64(s.geo.h), int64(s.bounds.Y1))
	if r.U64(blDeparted) == 0 {
		px, py := h.at(h.spawn)
		h.born = px >= x0 && px < x1 && py >= y0 && py < y1 && !(s.grid.mayBeIsland(px, py) && s.splashes(px, py))
	}
	if h.quiet > end {
		return
	}
	ax, ay := h.at(h.quiet)
	if ax < x0 || ax >= x1 || ay < y0 || ay >= y1 {
		return
	}
	// The ticks in it are an interval (the flight is a straight line):
	// the last one is the last before the first side crossed.
	lo := h.quiet + min(end-h.quiet, ticksIn(ax, int64(h.vx), x0, x1), ticksIn(ay, int64(h.vy), y0, y1))
	bx, by := h.at(lo)
	h.last = lo
	if s.grid.offIslands(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)) {
		return
	}
	// Off every island until the first tick inside one (in the sector,
	// splashes is exactly "inside an island's circle"; its prefilter
	// mayBeIsland only saves work): the ball flies through island boxes
	// it does not splash in, quiet.
	bx0, by0, bx1, by1 := min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)
	for _, k := range s.islands {
		is := &s.geo.islands[k]
		cx, cy, r := int64(is.X), int64(is.Y), int64(is.Radius)
		if cx+r < bx0 || cx-r > bx1 || cy+r < by0 || cy-r > by1 {
			continue
		}
		if u, ok := firstInside(ax-cx, ay-cy, int64(h.vx), int64(h.vy), r, h.last-h.quiet); ok {
			if u == 0 {
				h.last = h.quiet - 1 // splashes at once: no quiet tick
				return
			}
			h.last = h.quiet + u - 1 // the next islands are searched up to here
		}
	}
}

// firstInside returns the first u in 0..n at which the point d + v·u is
// strictly inside the circle of radius r around the origin (d·d < r·r, as
// splashes tests), and false if there is none.
func firstInside(dx, dy, vx, vy, r int64, n uint64) (uint64, bool) {
	f := func(u uint64) bool {
		x, y := dx+vx*int64(u), dy+vy*int64(u)
		return x*x+y*y < r*r
	}
	// |d + v·u|² is convex in u: the u inside form an interval around its
	// minimum, and the integer u nearest that minimum from either side,
	// m or m+1 (m = ⌊-d·v / v·v⌋, clamped to 0..n), is inside if any is.
	vv := vx*vx + vy*vy
	m := uint64(0)
	if vv != 0 {
		if q := floorDiv(-(dx*vx + dy*vy), vv); q > 0 {
			m = min(uint64(q), n)
		}
	}
	if !f(m) {
		if m+1 > n || !f(m+1) {
			return 0, false
		}
		m++
	}
	// Before the minimum the distance does not grow: the first u inside
	// is found by bisection over 0..m.
	lo, hi := uint64(0), m // f(hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if f(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

// ticksIn returns how many steps of v a point at p, lo ≤ p < hi, makes
// and stays in lo..hi-1 (all of them if v is 0).
func ticksIn(p, v, lo, hi int64) uint64 {
	switch {
	case v > 0:
		return uint64((hi - 1 - p) / v)
	case v < 0:
		return uint64((p - lo) / -v)
	}
	return math.MaxUint64
}

// at returns the ball's position at tick t (ballAt).
func (h *ballHot) at(t uint64) (int64, int64) {
	age := int64(t - h.spawn)
	return int64(h.x0) + int64(h.vx)*age, int64(h.y0) + int64(h.vy)*age
}

// hotBall returns ball i's cache entry, nil if it has none (a ball put
// into the table behind the sector's back; the general tests handle it).
func (s *Sector) hotBall(i int) *ballHot {
	if i < len(s.hot) {
		return &s.hot[i]
	}
	return nil
}

// flight is a cannonball whose path since its last hit test touched ships:
// s.touches[lo:hi], in their order along the path. continued says the
// path starts where this sector's previous hit test of the ball ended.
type flight struct {
	slot, lo, hi int32
	id, spawn    uint64
	continued    bool
}

// flyBalls moves every cannonball along its straight flight (positions are
// a function of the tick, so a ball's record is written only when it is
// fired or arrives), and resolves splashes, border crossings and then hits,
// in the order of the balls' ids: which of two balls sinks a ship, and so
// which flies on through the wreck, must not depend on the table slots
// they happen to occupy.
func (s *Sector) flyBalls(rec lineage.Recorder) {
	t := s.tick
	s.flights, s.touches = s.flights[:0], s.touches[:0]
	for i := s.balls.NextLiveExcept(0, s.sleep.asleep); i >= 0; i = s.balls.NextLiveExcept(i+1, s.sleep.asleep) {
		if h := s.hotBall(i); h != nil && (t >= h.quiet && t <= h.last || t == h.spawn && h.born) {
			x, y := h.at(t)
			ax, ay := x-int64(h.vx), y-int64(h.vy)
			continued := t != h.spawn
			if !continued {
				ax, ay = x, y // fired this tick: the gun's position alone
			}
			if s.trySleep(i, h, t, ax, ay) {
				continue // this tick's path is clear too
			}
			// (No owner prefilter, grid.mayTouchBut, here: on the late
			// benchmark tape it rules out 7 % of the paths mayTouch lets
			// through, which costs more than touching them.)
			if !s.grid.mayTouch(ax, ay, x, y) {
				continue
			}
			lo := len(s.touches)
			s.touches = s.grid.touching(ax, ay, x, y, h.owner, s.touches)
			if len(s.touches) > lo {
				s.flights = append(s.flights, flight{slot: int32(i), lo: int32(lo), hi: int32(len(s.touches)), id: s.balls.Row(i).U64(blID), spawn: h.spawn, continued: continued})
			}
			continue
		}
		r := s.balls.Row(i)
		spawn := r.U64(blSpawn)
		if t < spawn || t-spawn > uint64(r.U32(blLifetime)) {
			s.balls.Free(i) // fell into the sea
			continue
		}
		x, y := ballAt(r, t)
		if !s.geo.inWorld(x, y) {
			s.balls.Free(i)
			continue
		}
		if !s.bounds.Contains(x, y) {
			s.emigrateBall(i, s.geo.sectorAt(x, y))
			continue
		}
		if s.grid.mayBeIsland(x, y) && s.splashes(x, y) {
			s.balls.Free(i)
			continue
		}
		// Sweep the path since the last test: one tick, or on arrival the
		// ticks in transit (the source tested up to departure-1).
		from, continued := t-1, true
		if d := r.U64(blDeparted); d != 0 && r.U64(blArrived) == t {
			from, continued = d-1, false
		}
		if from < spawn || t-from > MaxCatchUp {
			from, continued = max(from, spawn, t-min(t, MaxCatchUp)), false
		}
		ax, ay := ballAt(r, from)
		if !s.grid.mayTouch(ax, ay, x, y) {
			continue // no ship near the path: touching would find none
		}
		lo := len(s.touches)
		s.touches = s.grid.touching(ax, ay, x, y, r.U64(blOwner), s.touches)
		if len(s.touches) > lo {
			s.flights = append(s.flights, flight{slot: int32(i), lo: int32(lo), hi: int32(len(s.touches)), id: r.U64(blID), spawn: spawn, continued: continued})
		}
	}
	// Ids are unique among the balls in flight (see broadsideBallID); the
	// spawn tick orders even balls of a forged migration.
	slices.SortFunc(s.flights, func(a, b flight) int {
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.spawn, b.spawn)
	})
	for k := range s.flights {
		s.resolveFlight(&s.flights[k], rec)
	}
}

// resolveFlight meets ball f with the ships its path touched, in their
// order along the path: it flies on through wrecks (its flight is then
// derived from theirs, sunk) and ends in the first ship afloat, which it
// damages. The ships afloat beyond that one, which it would have reached
// had that ship not been in the way, are derived from it too: that they
// were not hit depends on it.
func (s *Sector) resolveFlight(f *flight, rec lineage.Recorder) {
	ball := lineage.EntityID(f.id)
	hit := false
	for _, tc := range s.touches[f.lo:f.hi] {
		sh := tc.ship
		switch {
		case hit:
			if !sh.sunk {
				rec.Derived(lineage.EntityID(sh.id), ball)
			}
		case sh.sunk:
			// Reported once per passage, when the ball enters the wreck:
			// if this path starts inside it, the previous test here
			// ended inside it, so the ball met it then, sunk (afloat,
			// it would have ended the ball), and a wreck stays as it
			// is, where it is, until it respawns elsewhere.
			if !f.continued || !tc.startInside {
				rec.Derived(ball, lineage.EntityID(sh.id))
			}
		default:
			sh.sunk = s.hitShip(int(sh.slot), f, rec)
			hit = true
		}
	}
	if hit {
		s.balls.Free(int(f.slot))
	}
}

// splashes reports whether (x, y) is on an island.
func (s *Sector) splashes(x, y int64) bool {
	for _, k := range s.grid.islandsNear(x, y) {
		is := &s.geo.islands[k]
		dx, dy, rr := x-int64(is.X), y-int64(is.Y), int64(is.Radius)
		if dx*dx+dy*dy < rr*rr {
			return true
		}
	}
	return false
}

// hitShip applies ball f's damage to ship i, sinking it at zero hull; it
// reports whether the ship sank. The damage is drawn from a stream keyed by
// the tick, the ball and the ship. Lineage: the ship's damage is derived
// from the ball, and the ball's end from the ship.
func (s *Sector) hitShip(i int, f *flight, rec lineage.Recorder) bool {
	w := s.ships.Mut(i)
	ship := w.U64(shID)
	rng := newRNG(s.geo.cfg.Seed, rngHit, s.tick, f.id, ship)
	hull := w.I16(shHull) - int16(rng.between(MinDamage, MaxDamage))
	rec.Derived(lineage.EntityID(ship), lineage.EntityID(f.id))
	rec.Derived(lineage.EntityID(f.id), lineage.EntityID(ship))
	if hull > 0 {
		w.SetI16(shHull, hull)
		return false
	}
	w.SetI16(shHull, 0)
	w.SetU8(shSunk, 1)
	s.motion.Mut(i).SetI32(mvSpeed, 0)
	w.SetU64(shRespawnAt, s.tick+RespawnDelay)
	m := s.meta.Mut(0)
	m.SetU64(metaSunk, m.U64(metaSunk)+1)
	return true
}

// emigrateBall removes ball i and emits its migration to sector to.
func (s *Sector) emigrateBall(i, to int) {
	r := s.balls.Row(i)
	b := ballState{
		id: lineage.EntityID(r.U64(blID)), owner: lineage.EntityID(r.U64(blOwner)),
		x0: r.I32(blX0), y0: r.I32(blY0), vx: r.I32(blVX), vy: r.I32(blVY),
		spawnTick: r.U64(blSpawn), lifetime: r.U32(blLifetime),
	}
	s.balls.Free(i)
	s.bumpMigrated()
	s.outBuf = appendBallMigration(s.outBuf, s.index, to, s.tick, &b)
	s.outEnds = append(s.outEnds, len(s.outBuf))
}

// outputs copies this tick's migrations into fresh memory owned by the
// caller (one allocation for the payloads, one for the slice).
func (s *Sector) outputs() []replay.Output {
	if len(s.outEnds) == 0 {
		return nil
	}
	buf := append([]byte(nil), s.outBuf...)
	outs := make([]replay.Output, len(s.outEnds))
	start := 0
	for k, end := range s.outEnds {
		outs[k].Payload = buf[start:end:end]
		start = end
	}
	return outs
}

// errBadState is wrapped by Restored's errors.
var errBadState = errors.New("broadside: inconsistent restored state")

// Restored rebuilds the sector's derived indexes after its tables were
// restored from a snapshot and checks the state's invariants
// (replay.TableSim). On error the sector must not be stepped.
func (s *Sector) Restored() error {
	if s.meta.Len() != 1 || !s.meta.Live(0) {
		return fmt.Errorf("%w: meta table has %d records", errBadState, s.meta.Len())
	}
	s.tick = s.meta.Row(0).U64(metaTick)
	slots := make(map[uint32]int32, s.players.Len())
	for i := s.players.NextLive(0); i >= 0; i = s.players.NextLive(i + 1) {
		p := s.players.Row(i)
		id := p.U32(plPlayer)
		if _, dup := slots[id]; dup || id == 0 {
			return fmt.Errorf("%w: player %d in slot %d", errBadState, id, i)
		}
		slots[id] = int32(i)
		if sh := int(p.U32(plShipSlot)) - 1; sh >= 0 && (!s.ships.Live(sh) || int(s.ships.Row(sh).U32(shPlayerSlot)) != i) {
			return fmt.Errorf("%w: player %d's ship slot %d", errBadState, id, sh)
		}
	}
	if s.motion.Len() != s.ships.Len() {
		return fmt.Errorf("%w: %d ships but %d motion records", errBadState, s.ships.Len(), s.motion.Len())
	}
	for i := s.ships.NextLive(0); i >= 0; i = s.ships.NextLive(i + 1) {
		r := s.ships.Row(i)
		ps := int(r.U32(shPlayerSlot))
		switch {
		case !s.motion.Live(i):
			return fmt.Errorf("%w: ship slot %d has no motion record", errBadState, i)
		case !s.players.Live(ps) || int(s.players.Row(ps).U32(plShipSlot)) != i+1:
			return fmt.Errorf("%w: ship slot %d's player slot %d", errBadState, i, ps)
		case r.U64(shID) != uint64(ShipID(r.U32(shPlayer))) || s.players.Row(ps).U32(plPlayer) != r.U32(shPlayer):
			return fmt.Errorf("%w: ship slot %d id %#x", errBadState, i, r.U64(shID))
		case r.I16(shHull) < 0 || r.I16(shHull) > MaxHull || r.U8(shSunk) > 1:
			return fmt.Errorf("%w: ship slot %d hull/sunk", errBadState, i)
		}
	}
	for i := s.balls.NextLive(0); i >= 0; i = s.balls.NextLive(i + 1) {
		r := s.balls.Row(i)
		if r.U32(blLifetime) > MaxBallLifetime || abs32(r.I32(blVX)) > maxBallVelocity || abs32(r.I32(blVY)) > maxBallVelocity {
			return fmt.Errorf("%w: ball slot %d", errBadState, i)
		}
	}
	s.playerSlots = slots
	s.hot = s.hot[:0]
	s.sleep.reset()
	for i := s.balls.NextLive(0); i >= 0; i = s.balls.NextLive(i + 1) {
		s.cacheBall(i, -1)
	}
	s.hash = s.set.Hash()
	return nil
}
