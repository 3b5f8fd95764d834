package broadside

import "fmt"

// TickRate is the number of simulation ticks per second.
const TickRate = 30

// Game rules, in the fixed-point units of fixed.go (mm, mm/tick, ticks,
// binary angles).
const (
	// ShipRadius is the radius of a ship's hull for hits and groundings.
	ShipRadius = 14_000
	// MaxSpeed is a ship's top speed ahead: 10 m/s.
	MaxSpeed = 333
	// MaxReverse is a ship's top speed astern.
	MaxReverse = 83
	// Accel is the change of speed per tick toward the throttle's speed.
	Accel = 4
	// MaxTurn is the heading change per tick at full rudder and full
	// speed (≈13°/s). Ships below a quarter of MaxSpeed turn as if at a
	// quarter, so a stopped ship can still come about.
	MaxTurn = 80
	// MaxHull is a new ship's hull strength.
	MaxHull = 100
	// Guns is the number of guns on each side.
	Guns = 8
	// GunSpan is the distance along the hull between the first and the
	// last gun of a side.
	GunSpan = 28_000
	// GunAbeam is the distance of the gun ports from the keel.
	GunAbeam = 6_000
	// BallSpeed is a cannonball's muzzle speed: 120 m/s (plus jitter and
	// the ship's own velocity).
	BallSpeed = 4_000
	// BallLifetime is a cannonball's flight time in ticks (±5 of jitter),
	// which makes a range of about 300 m.
	BallLifetime = 75
	// MaxBallLifetime bounds the flight time accepted from a migration.
	MaxBallLifetime = 120
	// Reload is the number of ticks before a side can fire again.
	Reload = 75
	// MinDamage and MaxDamage bound the damage of one hit.
	MinDamage, MaxDamage = 3, 6
	// RespawnDelay is the number of ticks a sunk ship stays sunk.
	RespawnDelay = 5 * TickRate
	// MigrationMargin is how far past its sector's border a ship sails
	// before it migrates; the hysteresis keeps a ship running along a
	// border from migrating back and forth.
	MigrationMargin = 32_000
	// MaxCatchUp bounds the ticks of movement a ship makes up on arrival
	// for the ticks it spent in transit between sectors.
	MaxCatchUp = 5 * TickRate
	// maxBallVelocity bounds a ball's velocity components accepted from a
	// migration.
	maxBallVelocity = 20_000
)

// Config describes a world. All sectors of a world must be created from the
// same Config.
type Config struct {
	// Seed drives every random choice: islands, spawn points, gunnery
	// jitter and damage.
	Seed uint64
	// Width and Height are the size of the sea in metres, in
	// [1000, 100000].
	Width, Height int32
	// SectorsX and SectorsY split the sea into a grid of sectors (sim
	// shards), each in [1, 16] and each sector at least 500 m wide.
	SectorsX, SectorsY int
	// Islands is the number of islands, in [0, 1000].
	Islands int
	// MaxPlayers bounds the number of players (0 means 4096); later Joins
	// are ignored.
	MaxPlayers int
	// MaxBallsPerSector bounds the cannonballs in flight in one sector (0
	// means 65536); guns do not fire while a sector is full.
	MaxBallsPerSector int
}

// DefaultConfig is an 8 km × 8 km sea in 2 × 2 sectors with 24 islands,
// roomy enough for 1,000 ships.
func DefaultConfig() Config {
	return Config{Seed: 1, Width: 8000, Height: 8000, SectorsX: 2, SectorsY: 2, Islands: 24}
}

// Sectors returns the number of sectors.
func (c Config) Sectors() int { return c.SectorsX * c.SectorsY }

func (c Config) withDefaults() Config {
	if c.MaxPlayers == 0 {
		c.MaxPlayers = 4096
	}
	if c.MaxBallsPerSector == 0 {
		c.MaxBallsPerSector = 1 << 16
	}
	return c
}

// Validate reports whether c describes a world this package can simulate.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Width < 1000 || c.Width > 100_000 || c.Height < 1000 || c.Height > 100_000:
		return fmt.Errorf("broadside: world %d × %d m out of range [1000, 100000]", c.Width, c.Height)
	case c.SectorsX < 1 || c.SectorsX > 16 || c.SectorsY < 1 || c.SectorsY > 16:
		return fmt.Errorf("broadside: %d × %d sectors out of range [1, 16]", c.SectorsX, c.SectorsY)
	case c.Width/int32(c.SectorsX) < 500 || c.Height/int32(c.SectorsY) < 500:
		return fmt.Errorf("broadside: sectors narrower than 500 m")
	case c.Islands < 0 || c.Islands > 1000:
		return fmt.Errorf("broadside: %d islands out of range [0, 1000]", c.Islands)
	case c.MaxPlayers < 1 || c.MaxPlayers > 1<<20:
		return fmt.Errorf("broadside: max players %d out of range [1, %d]", c.MaxPlayers, 1<<20)
	case c.MaxBallsPerSector < 1 || c.MaxBallsPerSector > 1<<22:
		return fmt.Errorf("broadside: max balls per sector %d out of range [1, %d]", c.MaxBallsPerSector, 1<<22)
	}
	return nil
}

// Island is a round island; ships run aground on it and cannonballs splash
// against it. Coordinates in millimetres.
type Island struct {
	X, Y, Radius int32
}

// Rect is an axis-aligned rectangle [X0, X1) × [Y0, Y1) in millimetres.
type Rect struct {
	X0, Y0, X1, Y1 int32
}

// Contains reports whether (x, y) lies in r.
func (r Rect) Contains(x, y int64) bool {
	return x >= int64(r.X0) && x < int64(r.X1) && y >= int64(r.Y0) && y < int64(r.Y1)
}

// geometry is the immutable layout of a world derived from its Config: the
// same on every sector and every process.
type geometry struct {
	cfg     Config
	w, h    int32 // mm
	xs, ys  []int32
	islands []Island
}

func newGeometry(cfg Config) (*geometry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	g := &geometry{cfg: cfg, w: cfg.Width * 1000, h: cfg.Height * 1000}
	for i := 0; i <= cfg.SectorsX; i++ {
		g.xs = append(g.xs, int32(int64(g.w)*int64(i)/int64(cfg.SectorsX)))
	}
	for i := 0; i <= cfg.SectorsY; i++ {
		g.ys = append(g.ys, int32(int64(g.h)*int64(i)/int64(cfg.SectorsY)))
	}
	r := newRNG(cfg.Seed, 0x15_1a_4d)
	const minR, maxR, shore = 60_000, 260_000, 200_000
	for i := 0; i < cfg.Islands; i++ {
		rad := r.between(minR, maxR)
		lo := rad + shore
		if g.w-lo <= lo || g.h-lo <= lo {
			rad, lo = minR, minR
		}
		g.islands = append(g.islands, Island{
			X:      r.between(lo, g.w-lo),
			Y:      r.between(lo, g.h-lo),
			Radius: rad,
		})
	}
	return g, nil
}

// bounds returns sector i's rectangle.
func (g *geometry) bounds(i int) Rect {
	sx, sy := i%g.cfg.SectorsX, i/g.cfg.SectorsX
	return Rect{g.xs[sx], g.ys[sy], g.xs[sx+1], g.ys[sy+1]}
}

// sectorAt returns the sector containing (x, y), clamping points outside
// the world to the nearest sector.
func (g *geometry) sectorAt(x, y int64) int {
	sx, sy := 0, 0
	for sx+1 < g.cfg.SectorsX && x >= int64(g.xs[sx+1]) {
		sx++
	}
	for sy+1 < g.cfg.SectorsY && y >= int64(g.ys[sy+1]) {
		sy++
	}
	return sy*g.cfg.SectorsX + sx
}

// inWorld reports whether (x, y) is on the sea's rectangle.
func (g *geometry) inWorld(x, y int64) bool {
	return x >= 0 && x < int64(g.w) && y >= 0 && y < int64(g.h)
}

// spawnPoint returns where player's ship (re)appears at tick, and its
// heading: a function of the seed, the player and the tick only, so every
// sector computes the same point and exactly one of them creates the ship.
// It avoids islands (up to 32 draws).
func (g *geometry) spawnPoint(player uint32, tick uint64) (x, y int32, heading Angle) {
	r := newRNG(g.cfg.Seed, 0x5ba_3a, uint64(player), tick)
	const edge = 300_000
	lox, hix, loy, hiy := int32(edge), g.w-edge, int32(edge), g.h-edge
	for try := 0; try < 32; try++ {
		x, y = r.between(lox, hix), r.between(loy, hiy)
		if !g.onIsland(int64(x), int64(y), ShipRadius+80_000) {
			break
		}
	}
	return x, y, Angle(r.next())
}

// onIsland reports whether (x, y) is within margin of an island's shore.
func (g *geometry) onIsland(x, y, margin int64) bool {
	for _, is := range g.islands {
		dx, dy, rr := x-int64(is.X), y-int64(is.Y), int64(is.Radius)+margin
		if dx*dx+dy*dy < rr*rr {
			return true
		}
	}
	return false
}
