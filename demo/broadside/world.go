package broadside

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// World runs all the sectors of a world in one process, without a log: each
// tick's input is the migrations returned by the tick before followed by
// the commands submitted since, at consecutive positions.
//
// It is a shim kept only for cmd/broadside's lineage benchmark
// (bench_lineage.go) until that moves onto world.LocalWorld, then it goes:
// everything else generates or re-simulates matches on world.LocalWorld
// (see BotMatch), and MapOf gives a world's map. Do not add users.
type World struct {
	sectors []*Sector
	tick    uint64
	pos     uint64
	transit [][]byte // the migrations of the last tick
	queued  []replay.Command
	input   []replay.Command
}

// NewWorld returns a world of cfg's sectors at tick 0.
func NewWorld(cfg Config) (*World, error) {
	geo, err := newGeometry(cfg)
	if err != nil {
		return nil, err
	}
	w := &World{}
	for i := 0; i < cfg.Sectors(); i++ {
		s, err := newSector(geo, i)
		if err != nil {
			return nil, err
		}
		w.sectors = append(w.sectors, s)
	}
	return w, nil
}

// SubmitCommand encodes and queues a player command for the next tick.
func (w *World) SubmitCommand(player uint32, c PlayerCommand) error {
	b, err := EncodeCommand(c)
	if err != nil {
		return err
	}
	w.queued = append(w.queued, replay.Command{Player: player, Payload: b})
	return nil
}

// Step runs one tick of every sector and returns the tick's input records
// (valid until the next Step).
func (w *World) Step(rec lineage.Recorder) []replay.Command {
	w.tick++
	w.input = w.input[:0]
	for _, p := range w.transit {
		w.input = append(w.input, replay.Command{Payload: p})
	}
	clear(w.transit)
	w.transit = w.transit[:0]
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
			w.transit = append(w.transit, o.Payload)
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

// Ships calls fn for every ship, sector by sector in slot order.
func (w *World) Ships(fn func(ShipView)) {
	for _, s := range w.sectors {
		s.Ships(fn)
	}
}

// BallCount returns the number of cannonballs owned by the sectors.
func (w *World) BallCount() int {
	n := 0
	for _, s := range w.sectors {
		n += s.BallCount()
	}
	return n
}
