package viewer

import (
	"context"
	"fmt"
	"slices"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
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

// MatchSource is a bot match played in memory, every sector stepped on its
// own and recording lineage, as one replay.Runner per sector would. It
// keeps every tick's frame and input, so seeking is free; it is the
// viewer's demo and the source its tests drive.
type MatchSource struct {
	world  World
	cfg    broadside.Config
	frames []Frame // frames[k] is tick k+1
	inputs [][]replay.Command
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
	geo, err := broadside.NewWorld(cfg) // for the islands and the size
	if err != nil {
		return nil, err
	}
	src := &MatchSource{cfg: cfg}
	src.world = WorldOf(o.Title, cfg, geo)
	sim, err := newMatchSim(cfg)
	if err != nil {
		return nil, err
	}
	store := lineage.NewMemStore()
	if err := lineage.PutKindNames(ctx, store, KindNames); err != nil {
		return nil, err
	}
	lg := lineage.NewLog(lineage.LogOptions{Store: store})
	bots := broadside.NewFleet(o.Seed, true)
	for p := uint32(1); p <= uint32(o.Ships); p++ {
		if err := sim.submit(p, broadside.Join()); err != nil {
			return nil, err
		}
	}
	var views []broadside.ShipView
	for t := 0; t < o.Ticks; t++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in, err := sim.step(ctx, lg)
		if err != nil {
			return nil, err
		}
		src.inputs = append(src.inputs, cloneCommands(in))
		src.hashes = append(src.hashes, sim.hash())
		f := Frame{Tick: sim.tick}
		for _, s := range sim.sectors {
			s.Ships(func(v broadside.ShipView) { f.Ships = append(f.Ships, v) })
			s.Balls(func(v broadside.BallView) { f.Balls = append(f.Balls, v) })
		}
		src.frames = append(src.frames, f)
		views = append(views[:0], f.Ships...)
		bots.Act(sim.tick, views, func(p uint32, c broadside.PlayerCommand) { _ = sim.submit(p, c) })
	}
	if err := lg.Flush(ctx); err != nil {
		return nil, err
	}
	if src.ix, err = lineage.LoadIndex(ctx, store); err != nil {
		return nil, err
	}
	return src, nil
}

// WorldOf describes the world of cfg for the viewer; w is a
// broadside.World of cfg (for its islands and size).
func WorldOf(title string, cfg broadside.Config, w *broadside.World) World {
	width, height := w.Size()
	out := World{Title: title, Width: width, Height: height, Islands: w.Islands(), TickRate: broadside.TickRate}
	for _, s := range w.Sectors() {
		out.Sectors = append(out.Sectors, s.Bounds())
	}
	return out
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
// k+1's; see broadside.World.Hash).
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

// matchSim steps the sectors of a world one by one, each as its own
// lineage shard, with broadside.World's ordering: each tick's input is the
// migrations returned by the previous tick, then the player commands
// submitted since, at consecutive log positions followed by the position
// of the tick's marker (as in a server's log); every sector gets the whole
// input.
type matchSim struct {
	sectors []*broadside.Sector
	tick    uint64
	pos     uint64
	next    [][]byte
	queued  []replay.Command
	input   []replay.Command
}

func newMatchSim(cfg broadside.Config) (*matchSim, error) {
	w := &matchSim{}
	for i := 0; i < cfg.Sectors(); i++ {
		s, err := broadside.NewSector(cfg, i)
		if err != nil {
			return nil, err
		}
		w.sectors = append(w.sectors, s)
	}
	return w, nil
}

func (w *matchSim) submit(player uint32, c broadside.PlayerCommand) error {
	b, err := broadside.EncodeCommand(c)
	if err != nil {
		return err
	}
	w.queued = append(w.queued, replay.Command{Player: player, Payload: b})
	return nil
}

func (w *matchSim) step(ctx context.Context, lg lineage.TickRecorder) ([]replay.Command, error) {
	w.tick++
	w.input = w.input[:0]
	for _, m := range w.next {
		w.input = append(w.input, replay.Command{Payload: m})
	}
	w.next = w.next[:0]
	w.input = append(w.input, w.queued...)
	w.queued = w.queued[:0]
	for i := range w.input {
		w.pos++
		w.input[i].Pos, w.input[i].ClientSeq = w.pos, w.pos
	}
	// The tick's TICK marker follows its inputs in the log (see Log):
	// positions are the log's, which migrations carry in their payloads.
	w.pos++
	for i, s := range w.sectors {
		if err := lg.BeginTick(ctx, lineage.ShardID(i), w.tick); err != nil {
			return nil, err
		}
		for k := range w.input {
			c := &w.input[k]
			lg.Input(lineage.CommandInfo{Pos: c.Pos, Player: c.Player, Kind: KindOf(c)})
		}
		for _, o := range s.Step(w.tick, w.input, lg) {
			w.next = append(w.next, o.Payload)
		}
		if err := lg.EndTick(ctx); err != nil {
			return nil, err
		}
	}
	return w.input, nil
}

// hash combines the sectors' hashes as broadside.World.Hash does.
func (w *matchSim) hash() uint64 {
	h := uint64(len(w.sectors))
	for _, s := range w.sectors {
		h = table.Mix64(h ^ s.Hash())
	}
	return h
}

// KindOf classifies a log record for lineage (see KindNames).
func KindOf(c *replay.Command) uint8 {
	if c.Player == 0 {
		return 0
	}
	pc, err := broadside.DecodeCommand(c.Payload)
	if err != nil {
		return 255
	}
	return uint8(pc.Kind)
}
