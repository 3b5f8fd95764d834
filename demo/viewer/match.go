//go:build !js

package viewer

import (
	"context"
	"fmt"
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
	"github.com/anoptic/broadside/replay/world"
)

// MatchOptions configures PlayMatch.
type MatchOptions struct {
	// Config is the world; the zero Config means a 2.4 km × 2.4 km sea in
	// 2 × 2 sectors with 6 islands, seeded by Seed.
	Config broadside.Config
	// Seed seeds the world (with the zero Config) and the bots.
	Seed uint64
	// Ships is the number of bots (default 32); Ticks the ticks played
	// (default 900, 30 s).
	Ships, Ticks int
	// Title names the match in the viewer (default "demo match").
	Title string
}

// MatchSource is a bot match played in memory (broadside.BotMatch on a
// world.LocalWorld: one replay.Runner per sector, recording lineage). It
// keeps every tick's frame and input, so seeking is free; it is the
// viewer's demo and the source its tests drive.
type MatchSource struct {
	world  World
	cfg    broadside.Config
	frames []Frame // frames[k] is tick k+1
	inputs [][]replay.Command
	log    []msg.Entry
	hashes []uint64
	ix     *lineage.Index
	cur    int
}

var (
	_ Source        = (*MatchSource)(nil)
	_ SinkingSource = (*MatchSource)(nil)
)

// PlayMatch plays a match of bots and returns it, positioned at its first
// tick.
func PlayMatch(ctx context.Context, o MatchOptions) (*MatchSource, error) {
	cfg := o.Config
	if cfg == (broadside.Config{}) {
		cfg = broadside.Config{Seed: o.Seed, Width: 2400, Height: 2400, SectorsX: 2, SectorsY: 2, Islands: 6}
	}
	if o.Ships <= 0 {
		o.Ships = 32
	}
	if o.Ticks <= 0 {
		o.Ticks = 900
	}
	if o.Title == "" {
		o.Title = "demo match"
	}
	src := &MatchSource{cfg: cfg}
	var err error
	if src.world, err = WorldOf(o.Title, cfg); err != nil {
		return nil, err
	}
	store := lineage.NewMemStore()
	if err := lineage.PutKindNames(ctx, store, broadside.KindNames); err != nil {
		return nil, err
	}
	lg := lineage.NewLog(lineage.LogOptions{Store: store})
	m, err := broadside.NewBotMatch(cfg, o.Ships, o.Seed, world.LocalConfig{
		KeepLog: true, HistoryTicks: o.Ticks + 1,
		Recorder: func(uint32) lineage.Recorder { return lg },
		Observer: func(info replay.TickInfo) {
			if info.Shard == 0 { // every shard reads the whole input
				src.inputs = append(src.inputs, cloneCommands(info.Commands))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	for t := 0; t < o.Ticks; t++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := m.Step(); err != nil {
			return nil, err
		}
		f := Frame{Tick: m.World().Tick()}
		h := uint64(m.World().Shards())
		for i := range m.World().Shards() {
			s := m.Sector(i)
			s.Ships(func(v broadside.ShipView) { f.Ships = append(f.Ships, v) })
			s.Balls(func(v broadside.BallView) { f.Balls = append(f.Balls, v) })
			h = table.Mix64(h ^ s.Hash())
		}
		src.frames = append(src.frames, f)
		src.hashes = append(src.hashes, h)
	}
	src.log = m.World().Entries()
	if err := lg.Flush(ctx); err != nil {
		return nil, err
	}
	if src.ix, err = lineage.LoadIndex(ctx, store); err != nil {
		return nil, err
	}
	return src, nil
}

func cloneCommands(in []replay.Command) []replay.Command {
	out := slices.Clone(in)
	for i := range out {
		out[i].Payload = slices.Clone(out[i].Payload)
	}
	return out
}

// Config returns the match's world configuration.
func (m *MatchSource) Config() broadside.Config { return m.cfg }

// Inputs returns the records input to each tick (Inputs()[k] is tick
// k+1's), the log a recording of the match holds.
func (m *MatchSource) Inputs() [][]replay.Command { return m.inputs }

// Hashes returns the world hash after each tick (Hashes()[k] is tick
// k+1's): the sectors' hashes mixed in sector order.
func (m *MatchSource) Hashes() []uint64 { return m.hashes }

// Index returns the match's lineage.
func (m *MatchSource) Index() *lineage.Index { return m.ix }

// World implements Source.
func (m *MatchSource) World() World { return m.world }

// Ticks implements Source.
func (m *MatchSource) Ticks() (first, last uint64) {
	if len(m.frames) == 0 {
		return 0, 0
	}
	return m.frames[0].Tick, m.frames[len(m.frames)-1].Tick
}

// Frame implements Source.
func (m *MatchSource) Frame() *Frame {
	if len(m.frames) == 0 {
		return nil
	}
	return &m.frames[m.cur]
}

// Seek implements Source.
func (m *MatchSource) Seek(tick uint64) error {
	first, last := m.Ticks()
	if tick < first || tick > last || len(m.frames) == 0 {
		return fmt.Errorf("viewer: tick %d outside the match's %d..%d", tick, first, last)
	}
	m.cur = int(tick - first)
	return nil
}

// Step implements Source.
func (m *MatchSource) Step() error {
	if m.cur+1 >= len(m.frames) {
		return fmt.Errorf("viewer: the match ends at tick %d", m.frames[len(m.frames)-1].Tick)
	}
	m.cur++
	return nil
}

// Verification implements Source: a match simulated here has nothing to
// verify.
func (m *MatchSource) Verification() Verification { return Verification{State: VerifyNone} }

// Why implements Source.
func (m *MatchSource) Why(e lineage.EntityID, tick uint64, depth int) (*lineage.WhyResult, error) {
	return m.ix.Why(lineage.AnyShard, e, tick, depth)
}

// AfloatSince implements SinkingSource from the recorded frames.
func (m *MatchSource) AfloatSince(player uint32, sunkAt uint64) (uint64, bool) {
	first, last := m.Ticks()
	if sunkAt < first || sunkAt > last {
		return 0, false
	}
	id := broadside.ShipID(player)
	since := first
	for k := int(sunkAt-first) - 1; k >= 0; k-- {
		v, ok := m.frames[k].Ship(id)
		if ok && v.Sunk {
			since = m.frames[k].Tick + 1
			break
		}
	}
	return since, true
}

// Close implements Source.
func (m *MatchSource) Close() error { return nil }

// Sinkings returns every (player, tick) at which a ship was sunk, in order.
func (m *MatchSource) Sinkings() []Sinking {
	var out []Sinking
	sunk := map[uint32]bool{}
	for k := range m.frames {
		for _, v := range m.frames[k].Ships {
			if v.Sunk && !sunk[v.Player] {
				out = append(out, Sinking{Player: v.Player, Tick: m.frames[k].Tick})
			}
			sunk[v.Player] = v.Sunk
		}
	}
	return out
}

// Sinking is a ship sunk at a tick.
type Sinking struct {
	Player uint32
	Tick   uint64
}
