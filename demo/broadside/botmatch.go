//go:build !js

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
	world *world.LocalWorld
	bots  *Bots
	err   error
}

// Bots are the players of a generated match: every player joins at tick
// 1, then a Fleet gives its orders from the ships it sees between ticks.
type Bots struct {
	fleet   *Fleet
	players uint32
	views   []ShipView
}

// NewBots returns players bots whose fleet is seeded with seed.
func NewBots(players int, seed uint64) *Bots {
	return &Bots{fleet: NewFleet(seed, true), players: uint32(players)}
}

// Orders gives submit the bots' orders for tick; ships lists the ships
// of the world (every sector's, between two ticks).
func (b *Bots) Orders(tick uint64, ships func(func(ShipView)), submit func(player uint32, c PlayerCommand)) {
	if tick == 1 {
		for p := uint32(1); p <= b.players; p++ {
			submit(p, Join())
		}
		return
	}
	b.views = b.views[:0]
	ships(func(v ShipView) { b.views = append(b.views, v) })
	b.fleet.Act(tick, b.views, submit)
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
	return &BotMatch{world: w, bots: NewBots(players, seed)}, nil
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
	m.bots.Orders(tick, m.ships, submit)
	return m.err
}

// ships lists every sector's ships.
func (m *BotMatch) ships(fn func(ShipView)) {
	for i := range m.world.Shards() {
		m.Sector(i).Ships(fn)
	}
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
