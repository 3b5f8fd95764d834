package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/anoptic/broadside/internal/gamebench"
	"github.com/spf13/cobra"
)

func init() { registerBenchCmd(newBenchServeCmd) }

func newBenchServeCmd() *cobra.Command {
	cfg := gamebench.ServeConfig{Game: defaultRecordGame()}
	var quick, noProgress bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Benchmark the game server with bots: what each durability costs the players",
		Long: `Run the game server as 'serve' does (embedded command log, QUIC game server,
world of 'serve''s default flags) with --bots bots playing it, for each contender
and bot count, side by side in one run on this machine:

  memory  the embedded log's replicas acknowledge from memory ('replicated')
  fsync   they acknowledge after their write-ahead log's fsync ('durable',
          serve's default)

Each run starts a fresh server in a temporary directory, runs the bots for
--duration, drains and stops it. The contenders' order alternates from one bot
count to the next. The table gives the bots' acknowledgement p50, p99 and p99.9,
applied p50 and p99 (command sent to the state update showing it applied), the
world's ticks per second and lost tick periods (overruns), the state updates
each bot applied per second, the process's CPU (server, log, world and bots
share this process) and ratios against memory.

A second table splits the CPU from a CPU profile of each run by the goroutines'
pprof label "component": the server's cores (the process less the bots), the
bots' cores, and the server's CPU per player-tick (bots × world ticks) for the
embedded log, intake, fan-out, sim, the players' QUIC connections and the
runtime (other). --json FILE writes one row per contender and bot count.
--quick: 5 s runs with 10 and 30 bots.`,
		Example: `  broadside bench serve --quick
  broadside bench serve --bots 10,50,100 --duration 20s --json serve.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if quick {
				if !cmd.Flags().Changed("duration") {
					cfg.Duration = 5 * time.Second
				}
				if !cmd.Flags().Changed("bots") {
					cfg.Bots = []int{10, 30}
				}
			}
			cfg.Logger = quietLogger()
			if !noProgress {
				cfg.Progress = cmd.ErrOrStderr()
			}
			return gamebench.RunServe(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "5 s runs with 10 and 30 bots")
	f.StringSliceVar(&cfg.Contenders, "contenders", nil, "contenders to run (default: memory,fsync)")
	f.IntSliceVar(&cfg.Bots, "bots", []int{10, 50}, "bot counts")
	f.Float64Var(&cfg.Rate, "rate", 10, "commands per second per bot")
	f.DurationVar(&cfg.Duration, "duration", 15*time.Second, "length of each run")
	f.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&cfg.Dir, "dir", "", "parent `DIR` of the data directories (default: the system temp dir)")
	f.StringVar(&cfg.ProfileDir, "profile-dir", "", "write each run's CPU profile to `DIR`/serve-CONTENDER-BOTS.pprof")
	f.DurationVar(&cfg.AckHold, "ack-hold", 0, "the server's --ack-hold (see serve)")
	f.BoolVar(&cfg.AcksInState, "acks-in-state", false, "the server's --acks-in-state (see serve)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress on stderr")
	return cmd
}
