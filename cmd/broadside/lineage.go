package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/demo/sinking"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/spf13/cobra"
)

// newLineageCmd is `broadside lineage`: the three lineage queries against a
// stored match or a running server, an overview of a store, and the demo
// scene.
func newLineageCmd() *cobra.Command { return newLineageCmdWith(nil) }

// newLineageCmdWith is newLineageCmd answering from store instead of
// --store (a running server answers its admin endpoint this way).
func newLineageCmdWith(store lineage.Store) *cobra.Command {
	lf := &lineageFlags{store: store}
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
whole history; docs/benchmarks.md ('broadside bench lineage', "What Why is
sound against: the counterfactual oracle") compares the answers with
re-simulating the match without a command.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage info --store /tmp/bs-lineage
  broadside lineage why --store /tmp/bs-lineage --entity ship:27 --tick 1120 --depth 2
  broadside lineage affected --store /tmp/bs-lineage --pos 3796 --ticks 150
  broadside lineage frame --store /tmp/bs-lineage --tick 1080 --json

  # a running server (broadside serve --dev, with bots playing):
  broadside lineage info --server http://127.0.0.1:9090
  broadside lineage frame --server http://127.0.0.1:9090 --tick 300`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&lf.storeDir, "store", "", "lineage store `DIR` (Pebble)")
	pf.StringVar(&lf.recording, "recording", "", "answer from a recording's lineage (`FILE`.bsr; a fork's too) instead of a store")
	if store == nil {
		pf.StringVar(&lf.serverURL, "server", "", "ask a running server's admin endpoint (`URL`, e.g. http://127.0.0.1:9090) instead of a store")
		pf.StringVar(&lf.adminTokenFile, "admin-token-file", "", "with --server: the admin bearer token file (serve --admin-token-file)")
	}
	pf.BoolVar(&lf.asJSON, "json", false, "print JSON instead of text")
	cmd.AddCommand(newLineageWhyCmd(lf), newLineageAffectedCmd(lf), newLineageFrameCmd(lf), newLineageInfoCmd(lf), newLineageDemoCmd(lf))
	return cmd
}

// lineageFlags are the flags every lineage subcommand shares: where the
// lineage is and how to print it.
type lineageFlags struct {
	storeDir, serverURL string
	adminTokenFile      string
	recording           string
	asJSON              bool
	// store, if not nil, answers instead of --store.
	store lineage.Store
}

// withIndex runs fn on an index of the lineage, or sends the query of cmd
// to --server and prints its answer.
func (lf *lineageFlags) withIndex(cmd *cobra.Command, fn func(ix *lineage.Index) error) error {
	if lf.serverURL != "" {
		return linAskServer(cmd, lf.serverURL, lf.adminTokenFile)
	}
	if lf.store != nil {
		ix, err := lineage.LoadIndex(cmd.Context(), lf.store)
		if err != nil {
			return err
		}
		if ix.Stats().Ranges == 0 {
			return errors.New("the server has stored no lineage yet (it stores it at snapshots: try again in a moment)")
		}
		return fn(ix)
	}
	if lf.recording != "" {
		ix, err := bsr.LineageOf(lf.recording)
		if err != nil {
			return err
		}
		return fn(ix)
	}
	if lf.storeDir == "" {
		return errors.New("--store DIR, --recording FILE or --server URL is required")
	}
	ix, err := lineage.IndexDir(cmd.Context(), lf.storeDir, lineage.PebbleOptions{Logger: quietLogger()})
	if err != nil {
		return err
	}
	return fn(ix)
}

// print writes v as JSON with --json, or calls text.
func (lf *lineageFlags) print(w io.Writer, v func() any, text func()) error {
	if lf.asJSON {
		return report.WriteJSON(w, v())
	}
	text()
	return nil
}

// lineageWhyFlags are the flags of 'lineage why'.
type lineageWhyFlags struct {
	entity              string
	tick                uint64
	shard, depth, limit int
}

func newLineageWhyCmd(lf *lineageFlags) *cobra.Command {
	var o lineageWhyFlags
	why := &cobra.Command{
		Use:   "why",
		Short: "Which commands, players and entities made an entity's state at a tick",
		Long: `Why walks back from an entity's state at the end of a tick: its own commands,
and for every entity it was derived from (a cannonball from the ship that fired
it, a ship's damage from the ball that hit it), that entity's commands and
derivations before then, across sectors, up to --depth derivations.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage why --store /tmp/bs-lineage --entity ship:27 --tick 1120
  broadside lineage why --store /tmp/bs-lineage --entity ship:27 --tick 1120 --depth 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLineageWhy(cmd, lf, o) },
	}
	why.Flags().StringVar(&o.entity, "entity", "", "the entity: ship:PLAYER, ball:PLAYER.N or a numeric id")
	why.Flags().Uint64Var(&o.tick, "tick", 0, "the tick (its end state)")
	why.Flags().IntVar(&o.shard, "shard", -1, "the sector the frame is from (-1: wherever the entity was)")
	why.Flags().IntVar(&o.depth, "depth", 4, "derivations to follow (0: the entity's own commands; -1: no limit)")
	why.Flags().IntVar(&o.limit, "limit", 40, "commands to list, nearest first (0: all)")
	_ = why.MarkFlagRequired("entity")
	_ = why.MarkFlagRequired("tick")
	return why
}

func runLineageWhy(cmd *cobra.Command, lf *lineageFlags, o lineageWhyFlags) error {
	e, err := broadside.ParseEntity(o.entity)
	if err != nil {
		return err
	}
	sh := lineage.AnyShard
	if o.shard >= 0 {
		sh = lineage.ShardID(o.shard)
	}
	return lf.withIndex(cmd, func(ix *lineage.Index) error {
		r, err := ix.Why(sh, e, o.tick, o.depth)
		switch {
		case errors.Is(err, lineage.ErrUnknownEntity):
			return fmt.Errorf("no lineage recorded for %s up to tick %d", broadside.EntityName(e), o.tick)
		case errors.Is(err, lineage.ErrUnknownShard):
			return fmt.Errorf("no lineage recorded for sector %d", o.shard)
		case err != nil:
			return err
		}
		w := cmd.OutOrStdout()
		return lf.print(w, func() any { return linNames.Why(r, o.limit) }, func() { linNames.PrintWhy(w, r, o.limit) })
	})
}

// lineageAffectedFlags are the flags of 'lineage affected'.
type lineageAffectedFlags struct {
	pos, ticks, until uint64
	limit             int
}

func newLineageAffectedCmd(lf *lineageFlags) *cobra.Command {
	var o lineageAffectedFlags
	affected := &cobra.Command{
		Use:   "affected",
		Short: "Every entity a command influenced, transitively, and from which tick",
		Long: `Affected walks forward from the record at log position --pos (a player's
command, or an engine record such as a migration): the entities it was applied
to, from the tick it was input to, then every entity derived from an influenced
entity after it was influenced (a ball fired by an influenced ship, a ship hit
by an influenced ball), and so on, through --until or --ticks after the
command's tick. Each entity is listed with the tick from which it is
influenced, the entity it was derived from, its depth and its last event.

It is the converse of 'lineage why' without a depth limit: pos is among the
causes Why gives for an entity at a tick exactly when Affected lists that
entity from that tick or earlier. Like Why, it over-approximates: an entity
counts as influenced from then on, whether or not the command changed what it
did. Log positions come from 'lineage why', 'lineage frame' or
'broadside log read'.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage affected --store /tmp/bs-lineage --pos 3796 --ticks 150
  broadside lineage affected --store /tmp/bs-lineage --pos 3796 --until 1200 --limit 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLineageAffected(cmd, lf, o) },
	}
	affected.Flags().Uint64Var(&o.pos, "pos", 0, "the command's log position")
	affected.Flags().Uint64Var(&o.ticks, "ticks", 300, "follow this many ticks after the command's tick (0: to the end of the recording)")
	affected.Flags().Uint64Var(&o.until, "until", 0, "follow through this tick (overrides --ticks)")
	affected.Flags().IntVar(&o.limit, "limit", 60, "entities to list in text output (0: all)")
	_ = affected.MarkFlagRequired("pos")
	return affected
}

func runLineageAffected(cmd *cobra.Command, lf *lineageFlags, o lineageAffectedFlags) error {
	return lf.withIndex(cmd, func(ix *lineage.Index) error {
		r, err := ix.AffectedWithin(o.pos, o.until, o.ticks)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		return lf.print(w, func() any { return linNames.Affected(r) }, func() { linNames.PrintAffected(w, r, o.limit) })
	})
}

func newLineageFrameCmd(lf *lineageFlags) *cobra.Command {
	var tick uint64
	frame := &cobra.Command{
		Use:   "frame",
		Short: "Every record that was input to a tick, per shard (sector)",
		Long: `Frame lists every record of the command log that was input to --tick, per
shard (sector), in log order: its position, who sent it (a player, or the
engine for migrations of entities between sectors), its kind (join, throttle,
rudder, fire, migration; invalid for a payload the game rejected), and the
entities it was applied to there. Sectors with no lineage recorded for the
tick are left out; a tick outside the stored lineage ('lineage info' gives
the range) has none.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage frame --store /tmp/bs-lineage --tick 1080
  broadside lineage frame --store /tmp/bs-lineage --tick 1080 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lf.withIndex(cmd, func(ix *lineage.Index) error {
				r, err := ix.Frame(tick)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				return lf.print(w, func() any { return linNames.Frame(r) }, func() { linNames.PrintFrame(w, r) })
			})
		},
	}
	frame.Flags().Uint64Var(&tick, "tick", 0, "the tick")
	_ = frame.MarkFlagRequired("tick")
	return frame
}

func newLineageInfoCmd(lf *lineageFlags) *cobra.Command {
	info := &cobra.Command{
		Use:   "info",
		Short: "What a lineage store holds",
		Long: `Info summarizes the lineage a store (or a running server) holds: the range
of ticks, the shards (sectors), the ranges stored and their encoded size
(bytes per tick), the entities, events and derivations between entities, and
the input records (log positions) the lineage refers to. Queries of ticks
outside the range find nothing; a server started with --retain trims the
oldest lineage as it goes.`,
		Example: `  broadside lineage demo --store /tmp/bs-lineage
  broadside lineage info --store /tmp/bs-lineage
  broadside lineage info --store /tmp/bs-lineage --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lf.withIndex(cmd, func(ix *lineage.Index) error {
				st := ix.Stats()
				w := cmd.OutOrStdout()
				return lf.print(w, func() any { return st }, func() { st.WriteText(w) })
			})
		},
	}
	return info
}

func newLineageDemoCmd(lf *lineageFlags) *cobra.Command {
	var demo sinking.Options
	demoCmd := &cobra.Command{
		Use:   "demo",
		Short: "Play a small battle with bots, store its lineage and explain a sinking",
		Long: `Play a small Broadside battle in-process (bots, one replay.Runner per sector
on an in-memory log, the whole log re-simulated afterwards to check every hash),
record its lineage into a Pebble store, then pick a ship that sank (the one
with the most attackers) and print the players and commands that sank it, with
the ticks: the cannonballs that hit it, the ships that fired them, and the fire
orders behind them.`,
		Example: `  broadside lineage demo
  broadside lineage demo --store /tmp/bs-lineage --ships 60 --seed 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			demo.Store, demo.JSON = lf.storeDir, lf.asJSON
			return sinking.Run(cmd.Context(), cmd.OutOrStdout(), demo)
		},
	}
	df := demoCmd.Flags()
	df.Uint64Var(&demo.Seed, "seed", 3, "world and bot seed")
	df.IntVar(&demo.Ships, "ships", 48, "ships (one bot each)")
	df.IntVar(&demo.Ticks, "ticks", 1200, "ticks to play (30 per second)")
	return demoCmd
}

// linNames names Broadside entities in lineage answers.
var linNames = lineage.Names{Entity: broadside.EntityName, Kind: broadside.EntityKind}
