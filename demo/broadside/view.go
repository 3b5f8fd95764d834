package broadside

import (
	"math"

	"github.com/anoptic/broadside/lineage"
)

// ShipView is a read-only copy of a ship's state for rendering, state
// deltas and bots. Its fields are the game's fixed-point values; the float
// helpers are for drawing only and must never feed back into the game.
//
// The fields are ordered by size, so that a view takes 48 bytes instead
// of 56: clients hold thousands of them (a bot's tracker keeps 16 frames)
// and rewrite every one with each state update.
type ShipView struct {
	ID lineage.EntityID
	// Sector is the index of the sector that owns the ship.
	Sector int
	Player uint32
	// X and Y are the position in millimetres.
	X, Y int32
	// Speed is in millimetres per tick (negative astern).
	Speed int32
	// PortReload and StarboardReload are the ticks until each side can
	// fire (0: loaded).
	PortReload, StarboardReload uint32
	// Heading is the binary angle of the bow (0 along +X,
	// counter-clockwise).
	Heading Angle
	Hull    int16
	Sunk    bool
	// Throttle and Rudder are the player's current settings in percent.
	Throttle, Rudder int8
}

// Meters returns the position in metres.
func (v ShipView) Meters() (x, y float64) { return float64(v.X) / 1000, float64(v.Y) / 1000 }

// HeadingRadians returns the heading in radians, counter-clockwise from +X.
func (v ShipView) HeadingRadians() float64 { return float64(v.Heading) * (2 * math.Pi / 65536) }

// SpeedMetersPerSecond returns the speed in m/s.
func (v ShipView) SpeedMetersPerSecond() float64 { return float64(v.Speed) * TickRate / 1000 }

// BallView is a read-only copy of a cannonball's state.
type BallView struct {
	ID, Owner lineage.EntityID
	Sector    int
	// X and Y are the position at the current tick in millimetres; VX
	// and VY the velocity in millimetres per tick.
	X, Y, VX, VY int32
	// Age and Lifetime are in ticks: the ball falls when Age exceeds
	// Lifetime.
	Age, Lifetime uint32
}

// Meters returns the position in metres.
func (v BallView) Meters() (x, y float64) { return float64(v.X) / 1000, float64(v.Y) / 1000 }

// Ships calls fn for every ship of the sector in slot order (deterministic).
func (s *Sector) Ships(fn func(ShipView)) {
	for i := s.ships.NextLive(0); i >= 0; i = s.ships.NextLive(i + 1) {
		fn(s.shipView(i))
	}
}

// Ship returns the view of player's ship if this sector owns it.
func (s *Sector) Ship(player uint32) (ShipView, bool) {
	ps, ok := s.playerSlots[player]
	if !ok {
		return ShipView{}, false
	}
	sh := int(s.players.Row(int(ps)).U32(plShipSlot)) - 1
	if sh < 0 {
		return ShipView{}, false
	}
	return s.shipView(sh), true
}

func (s *Sector) shipView(i int) ShipView {
	r, m := s.ships.Row(i), s.motion.Row(i)
	p := s.players.Row(int(r.U32(shPlayerSlot)))
	reload := func(ready uint64) uint32 {
		if ready <= s.tick {
			return 0
		}
		return uint32(min(ready-s.tick, math.MaxUint32))
	}
	return ShipView{
		ID:              lineage.EntityID(r.U64(shID)),
		Player:          r.U32(shPlayer),
		Sector:          s.index,
		X:               m.I32(mvX),
		Y:               m.I32(mvY),
		Heading:         m.U16(mvHeading),
		Speed:           m.I32(mvSpeed),
		Hull:            r.I16(shHull),
		Sunk:            r.U8(shSunk) != 0,
		Throttle:        p.I8(plThrottle),
		Rudder:          p.I8(plRudder),
		PortReload:      reload(r.U64(shPortReady)),
		StarboardReload: reload(r.U64(shStbdReady)),
	}
}

// Balls calls fn for every cannonball of the sector in slot order, at its
// position of the current tick.
func (s *Sector) Balls(fn func(BallView)) {
	for i := s.balls.NextLive(0); i >= 0; i = s.balls.NextLive(i + 1) {
		r := s.balls.Row(i)
		x, y := ballAt(r, s.tick)
		fn(BallView{
			ID:       lineage.EntityID(r.U64(blID)),
			Owner:    lineage.EntityID(r.U64(blOwner)),
			Sector:   s.index,
			X:        int32(x),
			Y:        int32(y),
			VX:       r.I32(blVX),
			VY:       r.I32(blVY),
			Age:      uint32(s.tick - r.U64(blSpawn)),
			Lifetime: r.U32(blLifetime),
		})
	}
}

// ShipCount returns the number of ships the sector owns.
func (s *Sector) ShipCount() int { return s.ships.Len() }

// BallCount returns the number of cannonballs in flight in the sector.
func (s *Sector) BallCount() int { return s.balls.Len() }

// Stats are a sector's running totals.
type Stats struct {
	// BallsFired counts the balls fired in the sector.
	BallsFired uint64
	// Sunk counts the ships sunk in the sector.
	Sunk uint64
	// Migrated counts the ships and balls that left the sector.
	Migrated uint64
}

// Stats returns the sector's running totals.
func (s *Sector) Stats() Stats {
	m := s.meta.Row(0)
	return Stats{BallsFired: m.U64(metaBallSerial), Sunk: m.U64(metaSunk), Migrated: m.U64(metaMigrated)}
}
