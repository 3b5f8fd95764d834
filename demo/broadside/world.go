package broadside

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// World runs all the sectors of a world in one process over an in-memory
// stand-in for the command log, for tests, benchmarks, bots and demos. It
// orders records the way the engine does: each tick's input is the
// migrations returned by earlier ticks (after MigrationDelay further ticks)
// followed by the player commands submitted since the last Step, with
// consecutive log positions; every sector steps with the same input. In a
// deployment the cmdlog and one replay.Runner per sector do this instead.
type World struct {
	geo     *geometry
	sectors []*Sector
	tick    uint64
	pos     uint64

	delay   uint64
	transit []pendingOutput
	queued  []replay.Command
	input   []replay.Command
}

type pendingOutput struct {
	due     uint64 // first tick whose input carries it
	payload []byte
}

// NewWorld returns a world of cfg's sectors at tick 0.
func NewWorld(cfg Config) (*World, error) {
	geo, err := newGeometry(cfg)
	if err != nil {
		return nil, err
	}
	w := &World{geo: geo}
	for i := 0; i < cfg.Sectors(); i++ {
		s, err := newSector(geo, i)
		if err != nil {
			return nil, err
		}
		w.sectors = append(w.sectors, s)
	}
	return w, nil
}

// SetMigrationDelay makes migrations reach the log ticks later than the
// next tick, as when the log is slow; the default 0 delivers a migration
// returned by tick n in tick n+1's input.
func (w *World) SetMigrationDelay(ticks int) { w.delay = uint64(max(ticks, 0)) }

// Submit queues a command of player (0 for engine records) for the next
// tick. The payload is not copied.
func (w *World) Submit(player uint32, payload []byte) {
	w.queued = append(w.queued, replay.Command{Player: player, Payload: payload})
}

// SubmitCommand encodes and queues a player command.
func (w *World) SubmitCommand(player uint32, c PlayerCommand) error {
	b, err := EncodeCommand(c)
	if err != nil {
		return err
	}
	w.Submit(player, b)
	return nil
}

// Step runs one tick of every sector and returns the tick's input records
// (valid until the next Step), so callers can record and replay them.
func (w *World) Step(rec lineage.Recorder) []replay.Command {
	w.tick++
	w.input = w.input[:0]
	kept := w.transit[:0]
	for _, o := range w.transit {
		if o.due <= w.tick {
			w.input = append(w.input, replay.Command{Payload: o.payload})
		} else {
			kept = append(kept, o)
		}
	}
	clear(w.transit[len(kept):])
	w.transit = kept
	w.input = append(w.input, w.queued...)
	clear(w.queued)
	w.queued = w.queued[:0]
	for i := range w.input {
		w.pos++
		w.input[i].Pos = w.pos
		w.input[i].ClientSeq = w.pos
	}
	for _, s := range w.sectors {
		for _, o := range s.Step(w.tick, w.input, rec) {
			w.transit = append(w.transit, pendingOutput{due: w.tick + 1 + w.delay, payload: o.Payload})
		}
	}
	return w.input
}

// Tick returns the tick of the last Step.
func (w *World) Tick() uint64 { return w.tick }

// Hash combines the sectors' state hashes, in sector order.
func (w *World) Hash() uint64 {
	h := uint64(len(w.sectors))
	for _, s := range w.sectors {
		h = table.Mix64(h ^ s.Hash())
	}
	return h
}

// Sectors returns the world's sectors.
func (w *World) Sectors() []*Sector { return w.sectors }

// Islands returns the world's islands.
func (w *World) Islands() []Island { return append([]Island(nil), w.geo.islands...) }

// Size returns the world's width and height in millimetres.
func (w *World) Size() (width, height int32) { return w.geo.w, w.geo.h }

// Ships calls fn for every ship, sector by sector in slot order.
func (w *World) Ships(fn func(ShipView)) {
	for _, s := range w.sectors {
		s.Ships(fn)
	}
}

// Balls calls fn for every cannonball, sector by sector in slot order.
func (w *World) Balls(fn func(BallView)) {
	for _, s := range w.sectors {
		s.Balls(fn)
	}
}

// ShipCount returns the number of ships owned by the sectors (ships in
// transit between sectors are not counted; see InTransit).
func (w *World) ShipCount() int {
	n := 0
	for _, s := range w.sectors {
		n += s.ShipCount()
	}
	return n
}

// BallCount returns the number of cannonballs owned by the sectors.
func (w *World) BallCount() int {
	n := 0
	for _, s := range w.sectors {
		n += s.BallCount()
	}
	return n
}

// InTransit returns the number of ships and balls whose migration records
// have not yet reached the log.
func (w *World) InTransit() (ships, balls int) {
	for _, o := range w.transit {
		if len(o.payload) > 1 && o.payload[1] == kindShip {
			ships++
		} else {
			balls++
		}
	}
	return ships, balls
}
