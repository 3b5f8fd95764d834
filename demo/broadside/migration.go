package broadside

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/anoptic/broadside/lineage"
)

// Entity ids: the kind in the top byte, stable across sectors. An id names
// what the entity is, never a count of what a sector did before, so an
// entity has the same id in every history in which it exists (removing a
// broadside from the log renumbers no other ball):
//
//	ship: 0x01 << 56 | player       (one ship per player, kept across respawns)
//	ball: 0x02 << 56 | player << 24 | n
//
// where player is the firing ship's and n the ball's number among that
// ship's balls: volley × 2·Guns + side × Guns + gun, volley being the tick of
// the broadside divided by Reload (mod 2^24 / 2·Guns). A side fires at most
// once every Reload ticks, so a ship's broadsides of one side have distinct
// volleys: ids are unique for 2^20 × Reload ticks (about 30 days), far
// longer than a ball flies.
const (
	kindShip = 1
	kindBall = 2

	ballsPerVolley = 2 * Guns
	volleys        = 1 << 24 / ballsPerVolley
)

// ShipID returns the entity id of player's ship.
func ShipID(player uint32) lineage.EntityID {
	return lineage.EntityID(uint64(kindShip)<<56 | uint64(player))
}

// ballID returns the id of the n-th ball (mod 2^24) of player's ship.
func ballID(player uint32, n uint64) lineage.EntityID {
	return lineage.EntityID(uint64(kindBall)<<56 | uint64(player)<<24 | n&(1<<24-1))
}

// broadsideBallID returns the id of the ball of gun g (0 ≤ g < Guns) in the
// broadside player's ship fires from side at tick.
func broadsideBallID(player uint32, tick uint64, side Side, g int32) lineage.EntityID {
	var s uint64
	if side == Starboard {
		s = 1
	}
	return ballID(player, tick/Reload%volleys*ballsPerVolley+s*Guns+uint64(g))
}

// Migration payloads (replay.Command.Payload when Player == 0), appended by
// the source sector as a replay.Output and applied by the destination when
// the record comes back through the log:
//
//	0xB5 | kind u8 (1 ship, 2 ball) | from u16 | to u16 | departure tick u64 | body
//
// ship body (72 bytes): id u64, player u32, x i32, y i32, speed i32,
// heading u16, hull i16, sunk u8, 3 zero bytes, port ready tick u64,
// starboard ready tick u64, respawn tick u64, last fire position handled
// u64, source's highest applied log position u64.
//
// ball body (44 bytes): id u64, owner ship id u64, x0 i32, y0 i32, vx i32,
// vy i32, spawn tick u64, lifetime u32.
const (
	migrationMagic     = 0xB5
	migrationHeaderLen = 14
	shipBodyLen        = 72
	ballBodyLen        = 44
)

// errInvalidMigration is wrapped by every migration decoding error.
var errInvalidMigration = errors.New("broadside: invalid migration")

// shipState is a ship's full state as it travels between sectors.
type shipState struct {
	id                   lineage.EntityID
	player               uint32
	x, y, speed          int32
	heading              Angle
	hull                 int16
	sunk                 bool
	portReady, stbdReady uint64
	respawnAt            uint64
	fireHandledPos       uint64
	// appliedThrough is the source sector's highest applied log position:
	// the destination credits (lineage) the ship's commands after it.
	appliedThrough uint64
}

// ballState is a cannonball's full state as it travels between sectors.
type ballState struct {
	id, owner      lineage.EntityID
	x0, y0, vx, vy int32
	spawnTick      uint64
	lifetime       uint32
}

// migration is a decoded migration record.
type migration struct {
	kind     uint8
	from, to int
	departed uint64
	ship     shipState
	ball     ballState
}

func appendMigrationHeader(b []byte, kind uint8, from, to int, departed uint64) []byte {
	b = append(b, migrationMagic, kind)
	b = binary.LittleEndian.AppendUint16(b, uint16(from))
	b = binary.LittleEndian.AppendUint16(b, uint16(to))
	return binary.LittleEndian.AppendUint64(b, departed)
}

func appendShipMigration(b []byte, from, to int, departed uint64, s *shipState) []byte {
	b = appendMigrationHeader(b, kindShip, from, to, departed)
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(s.id))
	b = le.AppendUint32(b, s.player)
	b = le.AppendUint32(b, uint32(s.x))
	b = le.AppendUint32(b, uint32(s.y))
	b = le.AppendUint32(b, uint32(s.speed))
	b = le.AppendUint16(b, s.heading)
	b = le.AppendUint16(b, uint16(s.hull))
	var sunk byte
	if s.sunk {
		sunk = 1
	}
	b = append(b, sunk, 0, 0, 0)
	b = le.AppendUint64(b, s.portReady)
	b = le.AppendUint64(b, s.stbdReady)
	b = le.AppendUint64(b, s.respawnAt)
	b = le.AppendUint64(b, s.fireHandledPos)
	return le.AppendUint64(b, s.appliedThrough)
}

func appendBallMigration(b []byte, from, to int, departed uint64, s *ballState) []byte {
	b = appendMigrationHeader(b, kindBall, from, to, departed)
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(s.id))
	b = le.AppendUint64(b, uint64(s.owner))
	b = le.AppendUint32(b, uint32(s.x0))
	b = le.AppendUint32(b, uint32(s.y0))
	b = le.AppendUint32(b, uint32(s.vx))
	b = le.AppendUint32(b, uint32(s.vy))
	b = le.AppendUint64(b, s.spawnTick)
	return le.AppendUint32(b, s.lifetime)
}

// decodeMigration decodes and validates a migration payload against the
// world geometry g. It never panics; decoding into m does not allocate on
// success.
func decodeMigration(b []byte, g *geometry, m *migration) error {
	if len(b) < migrationHeaderLen || b[0] != migrationMagic {
		return fmt.Errorf("%w: bad header", errInvalidMigration)
	}
	le := binary.LittleEndian
	m.kind = b[1]
	m.from, m.to = int(le.Uint16(b[2:])), int(le.Uint16(b[4:]))
	m.departed = le.Uint64(b[6:])
	n := g.cfg.Sectors()
	if m.from >= n || m.to >= n || m.from == m.to {
		return fmt.Errorf("%w: sectors %d → %d of %d", errInvalidMigration, m.from, m.to, n)
	}
	body := b[migrationHeaderLen:]
	switch m.kind {
	case kindShip:
		if len(body) != shipBodyLen {
			return fmt.Errorf("%w: ship body of %d bytes", errInvalidMigration, len(body))
		}
		s := &m.ship
		s.id = lineage.EntityID(le.Uint64(body))
		s.player = le.Uint32(body[8:])
		s.x, s.y = int32(le.Uint32(body[12:])), int32(le.Uint32(body[16:]))
		s.speed = int32(le.Uint32(body[20:]))
		s.heading = le.Uint16(body[24:])
		s.hull = int16(le.Uint16(body[26:]))
		sunk := body[28]
		s.sunk = sunk == 1
		s.portReady, s.stbdReady = le.Uint64(body[32:]), le.Uint64(body[40:])
		s.respawnAt = le.Uint64(body[48:])
		s.fireHandledPos, s.appliedThrough = le.Uint64(body[56:]), le.Uint64(body[64:])
		switch {
		case s.player == 0 || s.id != ShipID(s.player):
			return fmt.Errorf("%w: ship id %#x of player %d", errInvalidMigration, s.id, s.player)
		case sunk > 1 || body[29] != 0 || body[30] != 0 || body[31] != 0:
			return fmt.Errorf("%w: ship flags", errInvalidMigration)
		case s.hull < 0 || s.hull > MaxHull || s.speed < -MaxReverse || s.speed > MaxSpeed:
			return fmt.Errorf("%w: ship hull %d speed %d", errInvalidMigration, s.hull, s.speed)
		case !g.inWorld(int64(s.x), int64(s.y)):
			return fmt.Errorf("%w: ship at (%d, %d) off the sea", errInvalidMigration, s.x, s.y)
		}
	case kindBall:
		if len(body) != ballBodyLen {
			return fmt.Errorf("%w: ball body of %d bytes", errInvalidMigration, len(body))
		}
		s := &m.ball
		s.id, s.owner = lineage.EntityID(le.Uint64(body)), lineage.EntityID(le.Uint64(body[8:]))
		s.x0, s.y0 = int32(le.Uint32(body[16:])), int32(le.Uint32(body[20:]))
		s.vx, s.vy = int32(le.Uint32(body[24:])), int32(le.Uint32(body[28:]))
		s.spawnTick = le.Uint64(body[32:])
		s.lifetime = le.Uint32(body[40:])
		switch {
		case uint64(s.id)>>56 != kindBall || uint64(s.owner)>>56 != kindShip:
			return fmt.Errorf("%w: ball id %#x owner %#x", errInvalidMigration, s.id, s.owner)
		case s.lifetime > MaxBallLifetime || s.impossibleDeparture(m.departed):
			return fmt.Errorf("%w: ball lifetime %d, spawned %d, departed %d", errInvalidMigration, s.lifetime, s.spawnTick, m.departed)
		case abs32(s.vx) > maxBallVelocity || abs32(s.vy) > maxBallVelocity:
			return fmt.Errorf("%w: ball velocity (%d, %d)", errInvalidMigration, s.vx, s.vy)
		case !g.inWorld(int64(s.x0), int64(s.y0)):
			return fmt.Errorf("%w: ball fired off the sea", errInvalidMigration)
		}
	default:
		return fmt.Errorf("%w: kind %d", errInvalidMigration, m.kind)
	}
	return nil
}

// impossibleDeparture reports whether a ball departing at tick departed would
// have left before it was fired or after it fell.
func (s *ballState) impossibleDeparture(departed uint64) bool {
	return departed < s.spawnTick || departed-s.spawnTick > uint64(s.lifetime)
}

func abs32(v int32) int64 {
	if v < 0 {
		return -int64(v)
	}
	return int64(v)
}
