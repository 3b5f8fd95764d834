package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/spf13/cobra"
)

// newLineageCmd is `broadside lineage`: the three lineage queries against a
// stored match or a running server, an overview of a store, and the demo
// scene.
func newLineageCmd() *cobra.Command { return newLineageCmdWith(nil) }

// newLineageCmdWith is newLineageCmd answering from store instead of
// --store (a running server answers its admin endpoint this way).
func newLineageCmdWith(store lineage.Store) *cobra.Command {
	var storeDir, serverURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "lineage",
		Short: "Ask which commands made a frame, and what a command changed",
		Long: `Query the lineage of a match: for each tick and entity, which commands (log
positions) and which other entities its state was derived from.

  why       the commands, players and chain of entities behind an entity's state at a tick
  affected  every entity a command influenced, and from which tick
  frame     every record that was input to a tick, per shard (sector)
  info      what a lineage store holds
  demo      play a small battle, store its lineage, and explain a sinking

Queries read a lineage store (--store DIR, the Pebble store written beside the
snapshots, or by 'broadside lineage demo'), or ask a running server
(--server http://ADMIN-ADDR, the --admin-addr of 'broadside serve'). Entities are named ship:PLAYER,
ball:PLAYER.N (the N-th ball of that player's ship), or by their numeric id. Answers are over-approximations of the
data that flowed into a state: an entity's state is taken to depend on its
whole history; see docs/benchmarks-lineage.md for how this compares with
re-simulating the match without a command.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage why --store /tmp/bs-lineage --entity ship:17 --tick 1432
  broadside lineage affected --store /tmp/bs-lineage --pos 2990 --ticks 300
  broadside lineage frame --store /tmp/bs-lineage --tick 1400 --json
  broadside lineage why --server http://127.0.0.1:9090 --entity ship:17 --tick 900`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&storeDir, "store", "", "lineage store `DIR` (Pebble)")
	if store == nil {
		pf.StringVar(&serverURL, "server", "", "ask a running server's admin endpoint (`URL`, e.g. http://127.0.0.1:9090) instead of a store")
	}
	pf.BoolVar(&asJSON, "json", false, "print JSON instead of text")

	// withIndex opens the store read side and indexes it.
	withIndex := func(cmd *cobra.Command, fn func(ix *lineage.Index) error) error {
		if serverURL != "" {
			return linAskServer(cmd, serverURL)
		}
		if store != nil {
			ix, err := lineage.LoadIndex(cmd.Context(), store)
			if err != nil {
				return err
			}
			if ix.Stats().Ranges == 0 {
				return errors.New("the server has stored no lineage yet (it stores it at snapshots: try again in a moment)")
			}
			return fn(ix)
		}
		if storeDir == "" {
			return errors.New("--store DIR or --server URL is required")
		}
		if _, err := os.Stat(storeDir); err != nil {
			return fmt.Errorf("lineage store %s: %w", storeDir, err)
		}
		s, err := lineage.OpenPebble(storeDir, lineage.PebbleOptions{Logger: quietLogger()})
		if err != nil {
			return err
		}
		defer s.Close()
		ix, err := lineage.LoadIndex(cmd.Context(), s)
		if err != nil {
			return err
		}
		if ix.Stats().Ranges == 0 {
			return fmt.Errorf("lineage store %s holds no lineage", storeDir)
		}
		return fn(ix)
	}

	var entity string
	var tick uint64
	var shard, depth, limit int
	why := &cobra.Command{
		Use:   "why",
		Short: "Which commands, players and entities made an entity's state at a tick",
		Long: `Why walks back from an entity's state at the end of a tick: its own commands,
and for every entity it was derived from (a cannonball from the ship that fired
it, a ship's damage from the ball that hit it), that entity's commands and
derivations before then, across sectors, up to --depth derivations.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := linParseEntity(entity)
			if err != nil {
				return err
			}
			sh := lineage.AnyShard
			if shard >= 0 {
				sh = lineage.ShardID(shard)
			}
			return withIndex(cmd, func(ix *lineage.Index) error {
				r, err := ix.Why(sh, e, tick, depth)
				switch {
				case errors.Is(err, lineage.ErrUnknownEntity):
					return fmt.Errorf("no lineage recorded for %s up to tick %d", linEntityName(e), tick)
				case errors.Is(err, lineage.ErrUnknownShard):
					return fmt.Errorf("no lineage recorded for sector %d", shard)
				case err != nil:
					return err
				}
				if asJSON {
					return linWriteJSON(cmd.OutOrStdout(), linWhyJSON(r, limit))
				}
				linPrintWhy(cmd.OutOrStdout(), r, limit)
				return nil
			})
		},
	}
	why.Flags().StringVar(&entity, "entity", "", "the entity: ship:PLAYER, ball:PLAYER.N or a numeric id")
	why.Flags().Uint64Var(&tick, "tick", 0, "the tick (its end state)")
	why.Flags().IntVar(&shard, "shard", -1, "the sector the frame is from (-1: wherever the entity was)")
	why.Flags().IntVar(&depth, "depth", 4, "derivations to follow (0: the entity's own commands; -1: no limit)")
	why.Flags().IntVar(&limit, "limit", 40, "commands to list, nearest first (0: all)")
	_ = why.MarkFlagRequired("entity")
	_ = why.MarkFlagRequired("tick")

	var pos, ticks, until uint64
	affected := &cobra.Command{
		Use:   "affected",
		Short: "Every entity a command influenced, transitively, and from which tick",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIndex(cmd, func(ix *lineage.Index) error {
				through := until
				if through == 0 && ticks > 0 {
					c, ok := ix.Command(pos)
					if !ok {
						return fmt.Errorf("no record at position %d in the lineage store", pos)
					}
					through = c.Tick + ticks
				}
				r, err := ix.Affected(pos, through)
				if errors.Is(err, lineage.ErrUnknownCommand) {
					return fmt.Errorf("the record at position %d was applied to no entity in the stored lineage", pos)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return linWriteJSON(cmd.OutOrStdout(), linAffectedJSON(r))
				}
				linPrintAffected(cmd.OutOrStdout(), r, limit)
				return nil
			})
		},
	}
	affected.Flags().Uint64Var(&pos, "pos", 0, "the command's log position")
	affected.Flags().Uint64Var(&ticks, "ticks", 300, "follow this many ticks after the command's tick (0: to the end of the recording)")
	affected.Flags().Uint64Var(&until, "until", 0, "follow through this tick (overrides --ticks)")
	affected.Flags().IntVar(&limit, "limit", 60, "entities to list in text output (0: all)")
	_ = affected.MarkFlagRequired("pos")

	frame := &cobra.Command{
		Use:   "frame",
		Short: "Every record that was input to a tick, per shard (sector)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIndex(cmd, func(ix *lineage.Index) error {
				r, err := ix.Frame(tick)
				if err != nil {
					return err
				}
				if asJSON {
					return linWriteJSON(cmd.OutOrStdout(), linFrameJSON(r))
				}
				linPrintFrame(cmd.OutOrStdout(), r)
				return nil
			})
		},
	}
	frame.Flags().Uint64Var(&tick, "tick", 0, "the tick")
	_ = frame.MarkFlagRequired("tick")

	info := &cobra.Command{
		Use:   "info",
		Short: "What a lineage store holds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withIndex(cmd, func(ix *lineage.Index) error {
				st := ix.Stats()
				if asJSON {
					return linWriteJSON(cmd.OutOrStdout(), st)
				}
				w := cmd.OutOrStdout()
				ticks := st.LastTick - st.FirstTick + 1
				fmt.Fprintf(w, "lineage of ticks %d..%d in %d shards: %d ranges, %d bytes (%.0f bytes/tick)\n",
					st.FirstTick, st.LastTick, st.Shards, st.Ranges, st.Bytes, float64(st.Bytes)/float64(ticks))
				fmt.Fprintf(w, "%d entities, %d events (%d derivations), %d input records\n", st.Entities, st.Events, st.Derivations, st.Inputs)
				return nil
			})
		},
	}

	var demo linDemoOptions
	demoCmd := &cobra.Command{
		Use:   "demo",
		Short: "Play a small battle with bots, store its lineage and explain a sinking",
		Long: `Play a small Broadside battle in-process (bots, every sector stepped on its own,
as one replay.Runner per sector does, and checked against broadside.World),
record its lineage into a Pebble store, then pick a ship that sank (the one
with the most attackers) and print the players and commands that sank it, with
the ticks: the cannonballs that hit it, the ships that fired them, and the fire
orders behind them.`,
		Example: `  broadside lineage demo
  broadside lineage demo --store /tmp/bs-lineage --ships 60 --seed 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			demo.store, demo.json = storeDir, asJSON
			return runLineageDemo(cmd.Context(), cmd.OutOrStdout(), demo)
		},
	}
	df := demoCmd.Flags()
	df.Uint64Var(&demo.seed, "seed", 3, "world and bot seed")
	df.IntVar(&demo.ships, "ships", 48, "ships (one bot each)")
	df.IntVar(&demo.ticks, "ticks", 1200, "ticks to play (30 per second)")

	cmd.AddCommand(why, affected, frame, info, demoCmd)
	return cmd
}

// Entity names: Broadside's ids carry the kind in the top byte (ship:
// player; ball: sector and serial).
func linEntityName(e lineage.EntityID) string { return broadside.EntityName(e) }

func linParseEntity(s string) (lineage.EntityID, error) { return broadside.ParseEntity(s) }

func linWriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// JSON views of the answers (entity names added for people and scripts).
type (
	linCauseJSON struct {
		Pos         uint64        `json:"pos"`
		Player      uint32        `json:"player"`
		Tick        uint64        `json:"tick"`
		Kind        string        `json:"kind"`
		Known       bool          `json:"known"`
		Entity      string        `json:"entity"`
		EntityID    uint64        `json:"entity_id"`
		AppliedTick uint64        `json:"applied_tick"`
		Shard       uint32        `json:"shard"`
		Depth       int           `json:"depth"`
		Path        []linStepJSON `json:"path"`
	}
	linLinkJSON struct {
		Entity   string `json:"entity"`
		EntityID uint64 `json:"entity_id"`
		Tick     uint64 `json:"tick"`
		Shard    uint32 `json:"shard"`
		Depth    int    `json:"depth"`
		Parent   int    `json:"parent"`
	}
	linWhyOut struct {
		Entity     string  `json:"entity"`
		EntityID   uint64  `json:"entity_id"`
		Tick       uint64  `json:"tick"`
		Shard      *uint32 `json:"shard,omitempty"`
		DepthLimit int     `json:"depth_limit"`
		Truncated  bool    `json:"truncated"`
		Horizon    uint64  `json:"horizon"`
		// Commands counts the distinct commands of the answer; Causes
		// lists the nearest of them (--limit).
		Commands int            `json:"commands"`
		Causes   []linCauseJSON `json:"causes"`
		Chain    []linLinkJSON  `json:"chain"`
	}
)

// linPath describes how a cause reaches the entity asked about: each step
// names an entity and the tick (and sector) at which the next one was
// derived from it, e.g. "ship:18 →(t543 s0) ball:0.2082 →(t572 s0) ship:27".
func linPath(r *lineage.WhyResult, c lineage.Cause) string {
	var b strings.Builder
	for _, l := range r.Path(c) {
		b.WriteString(linEntityName(l.Entity))
		if l.Parent >= 0 {
			fmt.Fprintf(&b, " →(t%d s%d) ", l.Tick, l.Shard)
		}
	}
	return b.String()
}

type linStepJSON struct {
	Entity string `json:"entity"`
	// Tick and Shard: where the next entity of the path was derived from
	// this one (absent for the last, the entity asked about).
	Tick  *uint64 `json:"tick,omitempty"`
	Shard *uint32 `json:"shard,omitempty"`
}

func linPathJSON(r *lineage.WhyResult, c lineage.Cause) []linStepJSON {
	var out []linStepJSON
	for _, l := range r.Path(c) {
		st := linStepJSON{Entity: linEntityName(l.Entity)}
		if l.Parent >= 0 {
			t, s := l.Tick, uint32(l.Shard)
			st.Tick, st.Shard = &t, &s
		}
		out = append(out, st)
	}
	return out
}

func linWhyJSON(r *lineage.WhyResult, limit int) linWhyOut {
	all := r.Causes(0)
	out := linWhyOut{Entity: linEntityName(r.Entity), EntityID: uint64(r.Entity), Tick: r.Tick, DepthLimit: r.DepthLimit,
		Truncated: r.Truncated, Horizon: r.Horizon, Commands: len(all), Causes: []linCauseJSON{}, Chain: []linLinkJSON{}}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	if r.Shard != lineage.AnyShard {
		s := uint32(r.Shard)
		out.Shard = &s
	}
	for _, c := range all {
		out.Causes = append(out.Causes, linCauseJSON{Pos: c.Pos, Player: c.Player, Tick: c.Tick, Kind: c.KindName, Known: c.Known,
			Entity: linEntityName(c.Entity), EntityID: uint64(c.Entity), AppliedTick: c.Applied, Shard: uint32(c.Shard), Depth: c.Depth,
			Path: linPathJSON(r, c)})
	}
	for _, l := range r.Chain() {
		out.Chain = append(out.Chain, linLinkJSON{Entity: linEntityName(l.Entity), EntityID: uint64(l.Entity), Tick: l.Tick,
			Shard: uint32(l.Shard), Depth: l.Depth, Parent: l.Parent})
	}
	return out
}

func linPrintWhy(w io.Writer, r *lineage.WhyResult, limit int) {
	where := "wherever it was"
	if r.Shard != lineage.AnyShard {
		where = fmt.Sprintf("in sector %d", r.Shard)
	}
	depth := fmt.Sprintf("up to %d derivations", r.DepthLimit)
	if r.DepthLimit < 0 {
		depth = "every derivation"
	}
	fmt.Fprintf(w, "Why is %s as it is at the end of tick %d (%s)? Following %s, across sectors.\n",
		linEntityName(r.Entity), r.Tick, where, depth)
	all := r.Causes(0) // nearest first
	players := map[uint32][]lineage.Cause{}
	for _, c := range all {
		players[c.Player] = append(players[c.Player], c)
	}
	entities := map[lineage.EntityID]bool{}
	for _, l := range r.Chain() {
		entities[l.Entity] = true
	}
	fmt.Fprintf(w, "%d commands from %d players (and the engine), through %d entities and %d derivations.\n",
		len(all), len(players)-btoi(len(players[0]) > 0), len(entities), len(r.Chain())-1)
	if r.Truncated {
		fmt.Fprintf(w, "The depth limit stopped the walk: --depth %d (or -1) finds more.\n", r.DepthLimit+2)
	}
	if r.Horizon > 0 {
		fmt.Fprintf(w, "History before tick %d was trimmed.\n", r.Horizon)
	}
	ids := make([]uint32, 0, len(players))
	for p := range players {
		ids = append(ids, p)
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(minDepth(players[a]), minDepth(players[b])), cmp.Compare(len(players[b]), len(players[a])), cmp.Compare(a, b))
	})
	fmt.Fprintf(w, "\nby player (nearest first):\n")
	const maxPlayers = 25
	for i, p := range ids {
		if i == maxPlayers {
			fmt.Fprintf(w, "  ... %d more players\n", len(ids)-maxPlayers)
			break
		}
		kinds := map[string]int{}
		for _, c := range players[p] {
			kinds[c.KindName]++
		}
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
		}
		slices.Sort(ks)
		who := fmt.Sprintf("player %d", p)
		if p == 0 {
			who = "engine"
		}
		fmt.Fprintf(w, "  %-12s %4d commands, nearest %d derivations away: %s\n", who, len(players[p]), minDepth(players[p]), strings.Join(ks, ", "))
	}
	fmt.Fprintf(w, "\ncommands, nearest first: position, input tick, player, kind, where applied, and how it reaches\n%s (each arrow names the tick and sector at which the next entity was derived from the previous):\n", linEntityName(r.Entity))
	for i, c := range all {
		if limit > 0 && i >= limit {
			fmt.Fprintf(w, "  ... %d more (--limit 0 lists all)\n", len(all)-limit)
			break
		}
		fmt.Fprintf(w, "  pos %-8d tick %-6d player %-5d %-10s applied to %s at tick %d: %s\n",
			c.Pos, c.Tick, c.Player, c.KindName, linEntityName(c.Entity), c.Applied, linPath(r, c))
	}
}

func minDepth(cs []lineage.Cause) int {
	d := cs[0].Depth
	for _, c := range cs {
		d = min(d, c.Depth)
	}
	return d
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

type linAffectedOut struct {
	Pos      uint64             `json:"pos"`
	Player   uint32             `json:"player"`
	Tick     uint64             `json:"tick"`
	Kind     string             `json:"kind"`
	Through  uint64             `json:"through"`
	Entities []linInfluenceJSON `json:"entities"`
	Counts   map[string]int     `json:"counts"`
}

type linInfluenceJSON struct {
	Entity    string `json:"entity"`
	EntityID  uint64 `json:"entity_id"`
	Since     uint64 `json:"since"`
	Shard     uint32 `json:"shard"`
	From      string `json:"from,omitempty"`
	Depth     int    `json:"depth"`
	LastEvent uint64 `json:"last_event"`
}

func linKindOfEntity(e lineage.EntityID) string {
	switch uint64(e) >> 56 {
	case 1:
		return "ships"
	case 2:
		return "balls"
	}
	return "other"
}

func linAffectedJSON(r *lineage.AffectedResult) linAffectedOut {
	out := linAffectedOut{Pos: r.Command.Pos, Player: r.Command.Player, Tick: r.Command.Tick, Kind: r.KindName, Through: r.Through,
		Entities: []linInfluenceJSON{}, Counts: map[string]int{}}
	for _, in := range r.Entities {
		j := linInfluenceJSON{Entity: linEntityName(in.Entity), EntityID: uint64(in.Entity), Since: in.Since, Shard: uint32(in.Shard),
			Depth: in.Depth, LastEvent: in.LastEvent}
		if in.From != 0 {
			j.From = linEntityName(in.From)
		}
		out.Entities = append(out.Entities, j)
		out.Counts[linKindOfEntity(in.Entity)]++
	}
	return out
}

func linPrintAffected(w io.Writer, r *lineage.AffectedResult, limit int) {
	who := fmt.Sprintf("player %d", r.Command.Player)
	if r.Command.Player == 0 {
		who = "the engine"
	}
	fmt.Fprintf(w, "The command at position %d (%s, %s, input to tick %d) influenced %d entities through tick %d:",
		r.Command.Pos, who, r.KindName, r.Command.Tick, len(r.Entities), r.Through)
	counts := map[string]int{}
	for _, in := range r.Entities {
		counts[linKindOfEntity(in.Entity)]++
	}
	var parts []string
	for _, k := range []string{"ships", "balls", "other"} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	fmt.Fprintf(w, " %s", strings.Join(parts, ", "))
	fmt.Fprintf(w, ".\nEach is influenced at every tick from 'since' on.\n\n  %-8s %-16s %-7s %-16s %-6s %s\n", "since", "entity", "sector", "derived from", "depth", "last event")
	for i, in := range r.Entities {
		if limit > 0 && i >= limit {
			fmt.Fprintf(w, "  ... %d more (--limit 0 lists all)\n", len(r.Entities)-limit)
			break
		}
		from := "(the command)"
		if in.From != 0 {
			from = linEntityName(in.From)
		}
		fmt.Fprintf(w, "  %-8d %-16s %-7d %-16s %-6d %d\n", in.Since, linEntityName(in.Entity), in.Shard, from, in.Depth, in.LastEvent)
	}
}

type linFrameOut struct {
	Tick   uint64 `json:"tick"`
	Shards []struct {
		Shard  uint32 `json:"shard"`
		Inputs []struct {
			Pos     uint64   `json:"pos"`
			Player  uint32   `json:"player"`
			Kind    string   `json:"kind"`
			Applied []string `json:"applied"`
		} `json:"inputs"`
	} `json:"shards"`
}

func linFrameJSON(r *lineage.FrameResult) linFrameOut {
	out := linFrameOut{Tick: r.Tick}
	for _, s := range r.Shards {
		js := struct {
			Shard  uint32 `json:"shard"`
			Inputs []struct {
				Pos     uint64   `json:"pos"`
				Player  uint32   `json:"player"`
				Kind    string   `json:"kind"`
				Applied []string `json:"applied"`
			} `json:"inputs"`
		}{Shard: uint32(s.Shard)}
		for _, in := range s.Inputs {
			ji := struct {
				Pos     uint64   `json:"pos"`
				Player  uint32   `json:"player"`
				Kind    string   `json:"kind"`
				Applied []string `json:"applied"`
			}{Pos: in.Pos, Player: in.Player, Kind: in.KindName, Applied: []string{}}
			for _, e := range in.Applied {
				ji.Applied = append(ji.Applied, linEntityName(e))
			}
			js.Inputs = append(js.Inputs, ji)
		}
		out.Shards = append(out.Shards, js)
	}
	return out
}

func linPrintFrame(w io.Writer, r *lineage.FrameResult) {
	if len(r.Shards) == 0 {
		fmt.Fprintf(w, "No lineage recorded for tick %d.\n", r.Tick)
		return
	}
	fmt.Fprintf(w, "Records input to tick %d, per sector, in log order:\n", r.Tick)
	for _, s := range r.Shards {
		fmt.Fprintf(w, "\nsector %d: %d records\n", s.Shard, len(s.Inputs))
		for _, in := range s.Inputs {
			who := fmt.Sprintf("player %d", in.Player)
			if in.Player == 0 {
				who = "engine"
			}
			applied := "applied to nothing here"
			if len(in.Applied) > 0 {
				var names []string
				for _, e := range in.Applied {
					names = append(names, linEntityName(e))
				}
				applied = "applied to " + strings.Join(names, ", ")
			}
			fmt.Fprintf(w, "  pos %-8d %-12s %-10s %s\n", in.Pos, who, in.KindName, applied)
		}
	}
}

// linKindNames names Broadside's command kinds in lineage (CommandInfo.Kind).
var linKindNames = broadside.KindNames

// linKindOf classifies a log record (broadside.KindOf).
func linKindOf(c *replay.Command) uint8 { return broadside.KindOf(c) }

// linWorld steps the sectors of a Broadside world one by one, each as its
// own lineage shard, the way one replay.Runner per sector will: the same
// ordering as broadside.World (each tick's input is the migrations
// returned by the previous tick, then the player commands submitted since,
// at consecutive log positions; every sector gets the whole input).
type linWorld struct {
	sectors []*broadside.Sector
	tick    uint64
	pos     uint64
	next    [][]byte // migrations for the next tick
	queued  []replay.Command
	input   []replay.Command
	// check, if set, is a broadside.World given the same commands, whose
	// sector hashes must match after every tick.
	check *broadside.World
}

func newLinWorld(cfg broadside.Config, check bool) (*linWorld, error) {
	w := &linWorld{}
	for i := 0; i < cfg.Sectors(); i++ {
		s, err := broadside.NewSector(cfg, i)
		if err != nil {
			return nil, err
		}
		w.sectors = append(w.sectors, s)
	}
	if check {
		var err error
		if w.check, err = broadside.NewWorld(cfg); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *linWorld) submit(player uint32, c broadside.PlayerCommand) error {
	b, err := broadside.EncodeCommand(c)
	if err != nil {
		return err
	}
	w.queued = append(w.queued, replay.Command{Player: player, Payload: b})
	if w.check != nil {
		w.check.Submit(player, b)
	}
	return nil
}

// step runs one tick of every sector, recording lineage with lg.
func (w *linWorld) step(ctx context.Context, lg lineage.TickRecorder) error {
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
	for i, s := range w.sectors {
		if err := lg.BeginTick(ctx, lineage.ShardID(i), w.tick); err != nil {
			return err
		}
		for k := range w.input {
			c := &w.input[k]
			lg.Input(lineage.CommandInfo{Pos: c.Pos, Player: c.Player, Kind: linKindOf(c)})
		}
		for _, o := range s.Step(w.tick, w.input, lg) {
			w.next = append(w.next, o.Payload)
		}
		if err := lg.EndTick(ctx); err != nil {
			return err
		}
	}
	if w.check != nil {
		w.check.Step(lineage.Nop)
		for i, s := range w.check.Sectors() {
			if s.Hash() != w.sectors[i].Hash() {
				return fmt.Errorf("tick %d: sector %d stepped alone diverged from broadside.World", w.tick, i)
			}
		}
	}
	return nil
}

func (w *linWorld) ships(fn func(broadside.ShipView)) {
	for _, s := range w.sectors {
		s.Ships(fn)
	}
}

type linDemoOptions struct {
	store string
	json  bool
	seed  uint64
	ships int
	ticks int
}

// linHull is a ship's hull from a tick on.
type linHull struct {
	tick uint64
	hull int16
}

// linRespawn returns the tick a ship sunk at tick sunk last came back with
// a full hull before that (0 if it never sank before).
func linRespawn(h []linHull, sunk uint64) uint64 {
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

// linSinking is a ship that sank.
type linSinking struct {
	player uint32
	tick   uint64
	sector int
}

// linHit is a cannonball that hit the sunk ship, and where it came from.
type linHit struct {
	Tick      uint64 `json:"tick"`
	Ball      string `json:"ball"`
	Shooter   string `json:"shooter"`
	Player    uint32 `json:"player"`
	FiredTick uint64 `json:"fired_tick"`
	FirePos   uint64 `json:"fire_pos,omitempty"`
	FireTick  uint64 `json:"fire_order_tick,omitempty"`
	HullAfter int16  `json:"hull_after"`
}

func runLineageDemo(ctx context.Context, w io.Writer, o linDemoOptions) error {
	dir := o.store
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "broadside-lineage-"); err != nil {
			return err
		}
	}
	store, err := lineage.OpenPebble(dir, lineage.PebbleOptions{Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer store.Close()
	if infos, err := store.Ranges(ctx); err != nil {
		return err
	} else if len(infos) > 0 {
		return fmt.Errorf("lineage store %s already holds a match: give an empty --store", dir)
	}
	if err := lineage.PutKindNames(ctx, store, linKindNames); err != nil {
		return err
	}
	cfg := broadside.Config{Seed: o.seed, Width: 2400, Height: 2400, SectorsX: 2, SectorsY: 2, Islands: 6}
	world, err := newLinWorld(cfg, true)
	if err != nil {
		return err
	}
	lg := lineage.NewLog(lineage.LogOptions{Store: store})
	fleet := broadside.NewFleet(o.seed, true)
	for p := uint32(1); p <= uint32(o.ships); p++ {
		if err := world.submit(p, broadside.Join()); err != nil {
			return err
		}
	}
	if !o.json {
		fmt.Fprintf(w, "Playing %d bots on a %d × %d m sea in %d sectors (seed %d), recording lineage into %s ...\n",
			o.ships, cfg.Width, cfg.Height, cfg.Sectors(), o.seed, dir)
	}
	hull := map[uint32][]linHull{}
	sunk := map[uint32]bool{}
	var sinkings []linSinking
	var views []broadside.ShipView
	for t := 1; t <= o.ticks; t++ {
		if err := world.step(ctx, lg); err != nil {
			return err
		}
		views = views[:0]
		world.ships(func(v broadside.ShipView) { views = append(views, v) })
		for _, v := range views {
			h := hull[v.Player]
			if len(h) == 0 || h[len(h)-1].hull != v.Hull {
				hull[v.Player] = append(h, linHull{world.tick, v.Hull})
			}
			if v.Sunk && !sunk[v.Player] {
				sinkings = append(sinkings, linSinking{player: v.Player, tick: world.tick, sector: v.Sector})
			}
			sunk[v.Player] = v.Sunk
		}
		fleet.Act(world.tick, views, func(p uint32, c broadside.PlayerCommand) { _ = world.submit(p, c) })
	}
	if err := lg.Flush(ctx); err != nil {
		return err
	}
	if len(sinkings) == 0 {
		return fmt.Errorf("no ship sank in %d ticks: try more --ticks or --ships", o.ticks)
	}
	ix, err := lineage.LoadIndex(ctx, store)
	if err != nil {
		return err
	}
	// The sinking to explain: the one with the most players among the
	// shooters (the earliest of those), for the most telling story. A ship
	// sunk twice is explained from its respawn on.
	var first linSinking
	var r *lineage.WhyResult
	var hits []linHit
	best := -1
	for _, s := range sinkings {
		why, err := ix.Why(lineage.ShardID(s.sector), broadside.ShipID(s.player), s.tick, 2)
		if err != nil {
			return err
		}
		hs := linHits(why, hull[s.player], linRespawn(hull[s.player], s.tick))
		shooters := map[uint32]bool{}
		for _, h := range hs {
			shooters[h.Player] = true
		}
		if len(shooters) > best {
			best, first, r, hits = len(shooters), s, why, hs
		}
	}
	ship := broadside.ShipID(first.player)
	st := ix.Stats()
	if o.json {
		return linWriteJSON(w, struct {
			Store     string    `json:"store"`
			Ticks     uint64    `json:"ticks"`
			Bytes     int       `json:"bytes"`
			Ship      string    `json:"ship"`
			SunkTick  uint64    `json:"sunk_tick"`
			Sector    int       `json:"sector"`
			Hits      []linHit  `json:"hits"`
			Why       linWhyOut `json:"why"`
			Checked   bool      `json:"checked_against_world"`
			LogEvents uint64    `json:"events"`
		}{dir, world.tick, st.Bytes, linEntityName(ship), first.tick, first.sector, hits, linWhyJSON(r, 0), true, lg.Stats().Events})
	}
	fmt.Fprintf(w, "Played %d ticks; every sector's state hash matched broadside.World at every tick.\n", world.tick)
	fmt.Fprintf(w, "Lineage: %d events in %d ranges, %d bytes (%.0f bytes/tick for the %d sectors).\n\n",
		st.Events, st.Ranges, st.Bytes, float64(st.Bytes)/float64(world.tick), cfg.Sectors())
	fmt.Fprintf(w, "%d sinkings; taking the one with the most players among the attackers:\n", len(sinkings))
	fmt.Fprintf(w, "%s (player %d) sank at tick %d in sector %d. Who sank it?\n\n", linEntityName(ship), first.player, first.tick, first.sector)
	byPlayer := map[uint32][]linHit{}
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
		orders := map[uint64]linHit{}
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
		countDepth(r, 0), dir)
	fmt.Fprintf(w, "  broadside lineage why --store %s --entity %s --tick %d --depth 2\n", dir, linEntityName(ship), first.tick)
	if n := len(hits); n > 0 && hits[n-1].FirePos != 0 {
		fmt.Fprintf(w, "  broadside lineage affected --store %s --pos %d --ticks 150\n", dir, hits[n-1].FirePos)
		fmt.Fprintf(w, "  broadside lineage frame --store %s --tick %d\n", dir, hits[n-1].FireTick)
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

// linHits reads, from a depth-2 Why of a sunk ship, the cannonballs that
// hit it (derivations of the ship from a ball), the ship that fired each
// (the ball's derivation), and the fire order behind it (the shooter's
// last fire command applied before it fired).
func linHits(r *lineage.WhyResult, hull []linHull, since uint64) []linHit {
	var hits []linHit
	causes := r.Causes(0)
	chain := r.Chain()
	for i, l := range chain {
		if l.Depth != 1 || uint64(l.Entity)>>56 != 2 || l.Tick < since {
			continue
		}
		h := linHit{Tick: l.Tick, Ball: linEntityName(l.Entity)}
		for _, s := range chain {
			if s.Parent != i {
				continue
			}
			h.Shooter, h.Player, h.FiredTick = linEntityName(s.Entity), uint32(s.Entity), s.Tick
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
	slices.SortStableFunc(hits, func(a, b linHit) int { return cmp.Compare(a.Tick, b.Tick) })
	return hits
}
