package main

import (
	"github.com/anoptic/broadside/internal/gamebench"
	"github.com/spf13/cobra"
)

func newBenchLineageCmd() *cobra.Command {
	var cfg gamebench.LineageConfig
	cmd := &cobra.Command{
		Use:   "lineage",
		Short: "Lineage recording overhead, size and Why latency on the 1,000-ship world",
		Long: `Measure lineage on the Broadside world at 1,000 bot ships (8 km sea, 2 × 2
sectors, aggressive bots keeping about 10,000 cannonballs in the air):

  overhead  one world steps tick after tick with its recorder rotating through
            three roles: lineage.Nop, a lineage.Log that seals ranges on the
            tick loop, and a Log that seals them on its own goroutine (each
            recording tick runs BeginTick, Input for every record, Step,
            EndTick, with the encoding and Pebble writes of the Log). Every
            triple of consecutive ticks has one tick in each role, in one of
            the six orders in turn; the figure is the median over triples of
            the recording tick's step time over the no-op tick's, minus one.
            The ratio of total times, which carries the ticks that seal a
            range, is reported beside it. Bots think between ticks, untimed,
            on a second world (the planner) that the measured one follows.
  size      encoded bytes per tick (all sectors) in the store
  Why       p50/p99 of Why over random (ship, tick) of a 10-minute match
            (18,000 ticks) recorded by the planner, at depth 2, --depth
            (default 4) and unlimited

--quick runs 500 triples and a 1-minute match (1,800 ticks), and says so.`,
		Example: `  broadside bench lineage --quick
  broadside bench lineage --json /tmp/bench-lineage.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Quick {
				if !cmd.Flags().Changed("triples") {
					cfg.Triples = 500
				}
				if !cmd.Flags().Changed("match-ticks") {
					cfg.MatchTicks = 1800
				}
				if !cmd.Flags().Changed("queries") {
					cfg.Queries = 300
				}
			}
			cfg.Logger, cfg.Progress = quietLogger(), cmd.ErrOrStderr()
			return gamebench.RunLineage(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cfg.Quick, "quick", false, "a short run: 500 triples, a 1-minute match, 300 queries")
	f.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	f.IntVar(&cfg.Ships, "ships", 1000, "bot ships")
	f.IntVar(&cfg.Triples, "triples", 3000, "triples of ticks measured (one tick per role each)")
	f.IntVar(&cfg.MatchTicks, "match-ticks", 18000, "length of the match Why is measured on (30 ticks per second)")
	f.IntVar(&cfg.Queries, "queries", 2000, "Why queries per depth (a tenth of them unlimited)")
	f.IntVar(&cfg.Depth, "depth", 4, "the depth of the headline Why figure")
	f.Uint64Var(&cfg.Seed, "seed", 1, "world and bot seed")
	f.BoolVar(&cfg.MemoryStore, "memory-store", false, "record into memory instead of Pebble")
	return cmd
}
