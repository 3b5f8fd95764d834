package broadside

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// ForkBot returns the bot that sails player's ship in a what-if fork
// (bsr.ForkConfig.Bots, `replay fork --as-bot player:P`): every 10 ticks
// (staggered by player, as the load bots think) it gives BotCommand's order
// for the ship from the sectors' state, seeing the ships of every sector
// within 1.5 km. Its variety is drawn from seed, so a fork is reproducible.
func ForkBot(player uint32, seed uint64) bsr.Bot {
	fleet := NewFleet(seed^uint64(player)<<32, false)
	var views []ShipView
	return func(tick uint64, sims []replay.TableSim) [][]byte {
		if (tick+uint64(player))%10 != 0 {
			return nil
		}
		views = views[:0]
		for _, sim := range sims {
			if s, ok := sim.(*Sector); ok {
				s.Ships(func(v ShipView) { views = append(views, v) })
			}
		}
		var out [][]byte
		own := -1
		for k := range views {
			if views[k].Player == player {
				own = k
			}
		}
		if own < 0 {
			return nil
		}
		fleet.nearby = fleet.nearby[:0]
		v := views[own]
		for _, o := range views {
			if dx, dy := int64(o.X-v.X), int64(o.Y-v.Y); dx*dx+dy*dy < 1_500_000*1_500_000 {
				fleet.nearby = append(fleet.nearby, o)
			}
		}
		if c, ok := BotCommand(fleet.nearby, v, fleet.rng); ok {
			if p, err := EncodeCommand(c); err == nil {
				out = append(out, p)
			}
		}
		return out
	}
}

// LineageEntity returns the lineage entity a record of the sector belongs
// to (bsr.LineageEntities): a ship (its ships, motion and player rows) or
// a cannonball.
func (s *Sector) LineageEntity(tableID uint32, slot int) (lineage.EntityID, bool) {
	shipID := func(i int) (lineage.EntityID, bool) {
		if !s.ships.Live(i) {
			return 0, false
		}
		return lineage.EntityID(s.ships.Row(i).U64(0)), true
	}
	switch tableID {
	case 3, 5:
		return shipID(slot)
	case 2:
		if !s.players.Live(slot) {
			return 0, false
		}
		return shipID(int(s.players.Row(slot).U32(plShipSlot)) - 1)
	case 4:
		if !s.balls.Live(slot) {
			return 0, false
		}
		return lineage.EntityID(s.balls.Row(slot).U64(0)), true
	}
	return 0, false
}
