// Package sinking is 'broadside lineage demo': a small Broadside battle
// played by bots on a world.LocalWorld, its lineage stored in a Pebble
// store, then a sinking explained from the lineage alone — the
// cannonballs that hit the ship, the ships that fired them and the fire
// orders behind them, with their ticks and log positions.
package sinking

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/world"
)

// Options configure the demo.
type Options struct {
	// Store is the lineage store's directory (default: a new temporary
	// one); it must be empty.
	Store string
	// JSON prints the answer as JSON.
	JSON  bool
	Seed  uint64
	Ships int
	Ticks int
}

// names names Broadside entities in lineage answers.
var names = lineage.Names{Entity: broadside.EntityName, Kind: broadside.EntityKind}

// hullAt is a ship's hull from a tick on.
type hullAt struct {
	tick uint64
	hull int16
}

// respawnOf returns the tick a ship sunk at tick sunk last came back with
// a full hull before that (0 if it never sank before).
func respawnOf(h []hullAt, sunk uint64) uint64 {
	since := uint64(0)
	for i := 1; i < len(h) && h[i].tick < sunk; i++ {
		if h[i].hull > h[i-1].hull {
			since = h[i].tick
		}
	}
	return since
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sunk is a ship that sank.
type sunk struct {
	player uint32
	tick   uint64
	sector int
}

// Hit is a cannonball that hit the sunk ship, and where it came from.
type Hit struct {
	Tick      uint64 `json:"tick"`
	Ball      string `json:"ball"`
	Shooter   string `json:"shooter"`
	Player    uint32 `json:"player"`
	FiredTick uint64 `json:"fired_tick"`
	FirePos   uint64 `json:"fire_pos,omitempty"`
	FireTick  uint64 `json:"fire_order_tick,omitempty"`
	HullAfter int16  `json:"hull_after"`
}

// story is a played battle and its lineage.
type story struct {
	dir      string
	ticks    uint64
	sectors  int
	events   uint64
	hull     map[uint32][]hullAt
	sinkings []sunk
}

// Run plays the battle, stores its lineage and explains a sinking to w.
func Run(ctx context.Context, w io.Writer, o Options) error {
	dir := o.Store
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "broadside-lineage-"); err != nil {
			return err
		}
	}
	store, err := lineage.OpenPebble(dir, lineage.PebbleOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer store.Close()
	if infos, err := store.Ranges(ctx); err != nil {
		return err
	} else if len(infos) > 0 {
		return fmt.Errorf("lineage store %s already holds a match: give an empty --store", dir)
	}
	if err := lineage.PutKindNames(ctx, store, broadside.KindNames); err != nil {
		return err
	}
	cfg := broadside.Config{Seed: o.Seed, Width: 2400, Height: 2400, SectorsX: 2, SectorsY: 2, Islands: 6}
	if !o.JSON {
		fmt.Fprintf(w, "Playing %d bots on a %d × %d m sea in %d sectors (seed %d), recording lineage into %s ...\n",
			o.Ships, cfg.Width, cfg.Height, cfg.Sectors(), o.Seed, dir)
	}
	s, err := play(ctx, cfg, o, store)
	if err != nil {
		return err
	}
	s.dir = dir
	ix, err := lineage.LoadIndex(ctx, store)
	if err != nil {
		return err
	}
	return s.explain(w, ix, o.JSON)
}

// play plays the battle on a LocalWorld, recording lineage into store,
// and checks that a re-simulation of its log reproduces every hash.
func play(ctx context.Context, cfg broadside.Config, o Options, store lineage.Store) (*story, error) {
	lg := lineage.NewLog(lineage.LogOptions{Store: store})
	m, err := broadside.NewBotMatch(cfg, o.Ships, o.Seed, world.LocalConfig{
		KeepLog: true, HistoryTicks: o.Ticks + 1, Recorder: func(uint32) lineage.Recorder { return lg },
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s := &story{sectors: cfg.Sectors(), hull: map[uint32][]hullAt{}}
	isSunk := map[uint32]bool{}
	for range o.Ticks {
		if err := m.Step(); err != nil {
			return nil, err
		}
		tick := m.World().Tick()
		for i := range s.sectors {
			m.Sector(i).Ships(func(v broadside.ShipView) {
				h := s.hull[v.Player]
				if len(h) == 0 || h[len(h)-1].hull != v.Hull {
					s.hull[v.Player] = append(h, hullAt{tick, v.Hull})
				}
				if v.Sunk && !isSunk[v.Player] {
					s.sinkings = append(s.sinkings, sunk{player: v.Player, tick: tick, sector: v.Sector})
				}
				isSunk[v.Player] = v.Sunk
			})
		}
	}
	s.ticks = m.World().Tick()
	if err := lg.Flush(ctx); err != nil {
		return nil, err
	}
	s.events = lg.Stats().Events
	if len(s.sinkings) == 0 {
		return nil, fmt.Errorf("no ship sank in %d ticks: try more --ticks or --ships", o.Ticks)
	}
	hashes, _, err := world.Resimulate(ctx, m.World().Game(), world.DefaultID, m.World().Entries(), s.ticks, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	for i, h := range hashes {
		for t := uint64(1); t <= s.ticks; t++ {
			got, ok1 := h.Get(t)
			want, ok2 := m.World().Hashes(uint32(i)).Get(t)
			if !ok1 || !ok2 || got.Hash != want.Hash {
				return nil, fmt.Errorf("tick %d: sector %d re-simulated from the log diverged from the match", t, i)
			}
		}
	}
	return s, nil
}

// explain picks the sinking with the most players among the shooters (the
// earliest of those), for the most telling story, and writes what sank it.
// A ship sunk twice is explained from its respawn on.
func (s *story) explain(w io.Writer, ix *lineage.Index, asJSON bool) error {
	var first sunk
	var r *lineage.WhyResult
	var hits []Hit
	best := -1
	for _, k := range s.sinkings {
		why, err := ix.Why(lineage.ShardID(k.sector), broadside.ShipID(k.player), k.tick, 2)
		if err != nil {
			return err
		}
		hs := hitsOf(why, s.hull[k.player], respawnOf(s.hull[k.player], k.tick))
		shooters := map[uint32]bool{}
		for _, h := range hs {
			shooters[h.Player] = true
		}
		if len(shooters) > best {
			best, first, r, hits = len(shooters), k, why, hs
		}
	}
	ship := broadside.ShipID(first.player)
	st := ix.Stats()
	if asJSON {
		return writeJSON(w, struct {
			Store     string          `json:"store"`
			Ticks     uint64          `json:"ticks"`
			Bytes     int             `json:"bytes"`
			Ship      string          `json:"ship"`
			SunkTick  uint64          `json:"sunk_tick"`
			Sector    int             `json:"sector"`
			Hits      []Hit           `json:"hits"`
			Why       lineage.WhyView `json:"why"`
			Checked   bool            `json:"checked_against_world"`
			LogEvents uint64          `json:"events"`
		}{s.dir, s.ticks, st.Bytes, broadside.EntityName(ship), first.tick, first.sector, hits, names.Why(r, 0), true, s.events})
	}
	fmt.Fprintf(w, "Played %d ticks; re-simulating the match's log reproduced every sector's state hash at every tick.\n", s.ticks)
	fmt.Fprintf(w, "Lineage: %d events in %d ranges, %d bytes (%.0f bytes/tick for the %d sectors).\n\n",
		st.Events, st.Ranges, st.Bytes, float64(st.Bytes)/float64(s.ticks), s.sectors)
	fmt.Fprintf(w, "%d sinkings; taking the one with the most players among the attackers:\n", len(s.sinkings))
	fmt.Fprintf(w, "%s (player %d) sank at tick %d in sector %d. Who sank it?\n\n", broadside.EntityName(ship), first.player, first.tick, first.sector)
	byPlayer := map[uint32][]Hit{}
	var players []uint32
	for _, h := range hits {
		if len(byPlayer[h.Player]) == 0 {
			players = append(players, h.Player)
		}
		byPlayer[h.Player] = append(byPlayer[h.Player], h)
	}
	slices.SortFunc(players, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(len(byPlayer[b]), len(byPlayer[a])), cmp.Compare(a, b))
	})
	fmt.Fprintf(w, "%d cannonballs hit it, fired by %d %s:\n", len(hits), len(players), plural(len(players), "player", "players"))
	for _, p := range players {
		orders := map[uint64]Hit{}
		for _, h := range byPlayer[p] {
			if h.FirePos != 0 {
				orders[h.FirePos] = h
			}
		}
		var os []string
		for _, h := range orders {
			os = append(os, fmt.Sprintf("position %d (tick %d)", h.FirePos, h.FireTick))
		}
		slices.Sort(os)
		fmt.Fprintf(w, "  player %-4d %2d %s, from fire orders at %s\n", p, len(byPlayer[p]), plural(len(byPlayer[p]), "hit ", "hits"), strings.Join(os, "; "))
	}
	fmt.Fprintf(w, "\nhit by hit (from the lineage: ship ← ball ← ship that fired ← its orders):\n")
	for _, h := range hits {
		order := "its fire order is not in the lineage"
		if h.FirePos != 0 {
			order = fmt.Sprintf("on player %d's fire order at position %d (tick %d)", h.Player, h.FirePos, h.FireTick)
		}
		fmt.Fprintf(w, "  tick %-5d %-14s fired at tick %-5d by %-9s %s; hull now %d\n", h.Tick, h.Ball, h.FiredTick, h.Shooter, order, h.HullAfter)
	}
	if n := len(hits); n > 0 {
		h := hits[n-1]
		fmt.Fprintf(w, "\nThe last blow: %s at tick %d, fired by %s (player %d) at tick %d.\n", h.Ball, h.Tick, h.Shooter, h.Player, h.FiredTick)
	}
	fmt.Fprintf(w, "\nThe full answer (its own %d commands, the shooters' other orders, and deeper derivations) is\none query away; the store stays in %s:\n",
		countDepth(r, 0), s.dir)
	fmt.Fprintf(w, "  broadside lineage why --store %s --entity %s --tick %d --depth 2\n", s.dir, broadside.EntityName(ship), first.tick)
	if n := len(hits); n > 0 && hits[n-1].FirePos != 0 {
		fmt.Fprintf(w, "  broadside lineage affected --store %s --pos %d --ticks 150\n", s.dir, hits[n-1].FirePos)
		fmt.Fprintf(w, "  broadside lineage frame --store %s --tick %d\n", s.dir, hits[n-1].FireTick)
	}
	return nil
}

func countDepth(r *lineage.WhyResult, d int) int {
	n := 0
	for _, c := range r.Causes(0) {
		if c.Depth == d {
			n++
		}
	}
	return n
}

// hitsOf reads, from a depth-2 Why of a sunk ship, the cannonballs that
// hit it (derivations of the ship from a ball), the ship that fired each
// (the ball's derivation), and the fire order behind it (the shooter's
// last fire command applied before it fired).
func hitsOf(r *lineage.WhyResult, hull []hullAt, since uint64) []Hit {
	var hits []Hit
	causes := r.Causes(0)
	chain := r.Chain()
	for i, l := range chain {
		if l.Depth != 1 || broadside.EntityKind(l.Entity) != "balls" || l.Tick < since {
			continue
		}
		h := Hit{Tick: l.Tick, Ball: broadside.EntityName(l.Entity)}
		for _, s := range chain {
			if s.Parent != i {
				continue
			}
			h.Shooter, h.Player, h.FiredTick = broadside.EntityName(s.Entity), uint32(s.Entity), s.Tick
			for _, c := range causes {
				if c.Entity == s.Entity && c.KindName == "fire" && c.Applied <= s.Tick && c.Pos > h.FirePos {
					h.FirePos, h.FireTick = c.Pos, c.Tick
				}
			}
		}
		for _, x := range hull {
			if x.tick <= h.Tick {
				h.HullAfter = x.hull
			}
		}
		hits = append(hits, h)
	}
	slices.SortStableFunc(hits, func(a, b Hit) int { return cmp.Compare(a.Tick, b.Tick) })
	return hits
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
