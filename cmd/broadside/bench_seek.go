package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/gamebench"
	"github.com/anoptic/broadside/replay/world"
	"github.com/spf13/cobra"
)

func init() { registerBenchCmd(newBenchSeekCmd) }

// defaultRecordGame is the world 'serve' runs with its default flags
// (--seed 1 --world-size 4000 --sectors 2 --islands 12); the seek
// benchmark and 'replay export' use it.
func defaultRecordGame() broadside.Config {
	return broadside.Config{Seed: 1, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 12}
}

func newBenchSeekCmd() *cobra.Command {
	cfg := gamebench.SeekConfig{Game: defaultRecordGame(), World: world.DefaultID}
	var quick bool
	cmd := &cobra.Command{
		Use:   "seek [--recording FILE]",
		Short: "Benchmark seeking in a .bsr recording against the Unreal and CS2 models",
		Long: `Seek to random ticks of a recording and measure how long each takes (cold: every
shard restored from its snapshots, then the log replayed), with the recording's
size per minute of play.

Without --recording it first generates one: a bot match of --ships ships in
the world 'serve' runs (4 km × 4 km, 2 × 2 sectors, 12 islands), --minutes
long at 30 Hz, recorded with the default adaptive snapshot policy (seek target
16 ms). Side by side, on the same match and with our own seeker, the anchors'
models:

  unreal-30s  a full checkpoint every 30 s and fast-forward (Unreal Engine replays)
  cs2-60s     a full snapshot every 60 s and no index: the file is read from the
              start up to the tick before the seek (CS2 demos)

--quick: a 3-minute match, fewer seeks. The JSON keys seek_p50_ms, seek_p99_ms
and bytes_per_minute are ours.`,
		Example: `  broadside bench seek --quick
  broadside replay export --bots 20 --minutes 1 -o bots.bsr
  broadside bench seek --recording bots.bsr --seeks 200 --no-anchors`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if quick {
				if !cmd.Flags().Changed("minutes") {
					cfg.Minutes = 3
				}
				if !cmd.Flags().Changed("seeks") {
					cfg.Seeks = 200
				}
				if !cmd.Flags().Changed("anchor-seeks") {
					cfg.AnchorSeeks = 40
				}
			}
			cfg.Logger, cfg.Progress = quietLogger(), cmd.ErrOrStderr()
			return gamebench.RunSeek(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "a 3-minute match and fewer seeks (about a minute)")
	f.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&cfg.Recording, "recording", "", "measure this recording instead of generating one")
	f.StringVar(&cfg.Keep, "keep", "", "keep the generated recording at this path")
	f.IntVar(&cfg.Ships, "ships", 200, "bot ships in the generated match")
	f.Float64Var(&cfg.Minutes, "minutes", 60, "length of the generated match in minutes")
	f.IntVar(&cfg.Seeks, "seeks", 1000, "random seeks measured on our recording")
	f.IntVar(&cfg.AnchorSeeks, "anchor-seeks", 200, "random seeks measured on each anchor model")
	f.BoolVar(&cfg.NoAnchors, "no-anchors", false, "measure our recording only")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the bots and of the random ticks")
	f.StringVar(&cfg.Dir, "dir", "", "directory for the recordings (default: the system's temporary directory)")
	return cmd
}
