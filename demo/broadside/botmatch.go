package broadside

import (
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// BotMatch plays a Broadside world offline on a world.LocalWorld with a
// Fleet: every player joins at tick 1, then the fleet gives its orders
// from the ships it sees between ticks. It is the one generated match of
// the tools, tests and benchmarks (the viewer's generated matches, the
// lineage demo, the seek and sim benchmarks).
type BotMatch struct {
	world   *world.LocalWorld
	fleet   *Fleet
	players uint32
	views   []ShipView
	err     error
}

// NewBotMatch returns a match of players bots on a world of cfg, their
// fleet seeded with seed; lc configures the LocalWorld (its Game is set
// here).
func NewBotMatch(cfg Config, players int, seed uint64, lc world.LocalConfig) (*BotMatch, error) {
	g, err := NewGame(cfg, 0)
	if err != nil {
		return nil, err
	}
	lc.Game = g
	w, err := world.NewLocal(lc)
	if err != nil {
		return nil, err
	}
	return &BotMatch{world: w, fleet: NewFleet(seed, true), players: uint32(players)}, nil
}

// World returns the match's LocalWorld.
func (m *BotMatch) World() *world.LocalWorld { return m.world }

// Sector returns sector i (use it between steps only).
func (m *BotMatch) Sector(i int) *Sector { return m.world.Sim(uint32(i)).(*Sector) }

// Act submits the bots' commands for tick.
func (m *BotMatch) Act(tick uint64) error {
	submit := func(p uint32, c PlayerCommand) {
		if m.err != nil {
			return
		}
		b, err := EncodeCommand(c)
		if err == nil {
			err = m.world.Submit(p, b)
		}
		m.err = err
	}
	if tick == 1 {
		for p := uint32(1); p <= m.players; p++ {
			submit(p, Join())
		}
		return m.err
	}
	m.views = m.views[:0]
	for i := range m.world.Shards() {
		m.Sector(i).Ships(func(v ShipView) { m.views = append(m.views, v) })
	}
	m.fleet.Act(tick, m.views, submit)
	return m.err
}

// Step plays the next tick: the bots' orders, then every sector.
func (m *BotMatch) Step() error {
	if err := m.Act(m.world.Tick() + 1); err != nil {
		return err
	}
	return m.world.Step()
}

// Source returns the match's log as a replay.Source, played as it is read
// through tick through (world.LocalWorld.Source).
func (m *BotMatch) Source(through uint64) replay.Source { return m.world.Source(through, m.Act) }

// Close releases the match.
func (m *BotMatch) Close() { m.world.Close() }
