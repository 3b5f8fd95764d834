package broadside

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/anoptic/broadside/replay"
)

// StateSummary is what a world's sectors hold at a tick, for people and
// scripts ('replay seek'): counts per sector and the most damaged ships.
type StateSummary struct {
	Sectors []SectorSummary `json:"sectors"`
	Ships   int             `json:"ships"`
	Sunk    int             `json:"sunk"`
	Balls   int             `json:"balls"`
	Listed  []ShipSummary   `json:"listed_ships"`
}

// SectorSummary counts one sector's entities.
type SectorSummary struct {
	Sector int    `json:"sector"`
	Ships  int    `json:"ships"`
	Sunk   int    `json:"sunk"`
	Balls  int    `json:"balls"`
	Hash   string `json:"hash"`
}

// ShipSummary is one ship in units people read.
type ShipSummary struct {
	Player   uint32  `json:"player"`
	Sector   int     `json:"sector"`
	X        float64 `json:"x_m"`
	Y        float64 `json:"y_m"`
	Heading  float64 `json:"heading_deg"`
	Speed    float64 `json:"speed_mps"`
	Hull     int16   `json:"hull"`
	Sunk     bool    `json:"sunk"`
	Throttle int8    `json:"throttle"`
	Rudder   int8    `json:"rudder"`
}

// Summarize summarizes the sectors sims (Broadside sectors, in shard
// order), listing the list most damaged ships.
func Summarize(sims []replay.TableSim, list int) StateSummary {
	var sum StateSummary
	var all []ShipView
	for i, sim := range sims {
		sec, ok := sim.(*Sector)
		if !ok {
			continue
		}
		ss := SectorSummary{Sector: i, Balls: sec.BallCount(), Hash: fmt.Sprintf("%#016x", sec.Hash())}
		sec.Ships(func(v ShipView) {
			ss.Ships++
			if v.Sunk {
				ss.Sunk++
			}
			all = append(all, v)
		})
		sum.Sectors = append(sum.Sectors, ss)
		sum.Ships += ss.Ships
		sum.Sunk += ss.Sunk
		sum.Balls += ss.Balls
	}
	slices.SortFunc(all, func(a, b ShipView) int {
		return cmp.Or(cmp.Compare(a.Hull, b.Hull), cmp.Compare(a.Player, b.Player))
	})
	for _, v := range all[:min(list, len(all))] {
		x, y := v.Meters()
		sum.Listed = append(sum.Listed, ShipSummary{Player: v.Player, Sector: v.Sector, X: x, Y: y,
			Heading: v.HeadingRadians() * 180 / math.Pi, Speed: v.SpeedMetersPerSecond(),
			Hull: v.Hull, Sunk: v.Sunk, Throttle: v.Throttle, Rudder: v.Rudder})
	}
	return sum
}
