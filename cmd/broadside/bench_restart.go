package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/anoptic/broadside/internal/gamebench"
	"github.com/spf13/cobra"
)

func init() { registerBenchCmd(newBenchRestartCmd) }

func newBenchRestartCmd() *cobra.Command {
	cfg := gamebench.RestartConfig{Game: defaultRecordGame()}
	var quick, noProgress bool
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Benchmark a killed server's restart: time to the first live tick and the first acknowledged command",
		Long: `Kill a whole game server (embedded command log, game server, world) with no clean
stop and reopen it from its data directory, for matches of --minutes simulated
minutes, and measure, from the reopening (a new process's start):

  log open         the embedded log's stores and write-ahead logs opened
  log answers      its first tail check answered (replicas recovered, a view agreed)
  first live tick  the first tick the reopened world appended is complete in
                   every sector (snapshots restored, the log replayed up to it)
  first ack        a reconnecting player's first command acknowledged durable

Each match is built in fsync durability in 'serve''s default world, with the
world's ticker running faster than real time (--build-rate) and --players
scripted players' commands appended as it goes; the world snapshots as it would
live. Each match is then killed and reopened --runs times (each reopened server
plays a second, then is killed again); the table gives medians with their range,
and the ratio of each match's medians to the shortest match's: a restart should
not grow with the match. --quick divides the lengths by 20 (3 s, 30 s, 3 min).
Everything runs in this process on 127.0.0.1; the data directories are removed.`,
		Example: `  broadside bench restart --quick
  broadside bench restart --json restart.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if quick {
				for i := range cfg.Minutes {
					cfg.Minutes[i] /= 20
				}
			}
			cfg.Logger = quietLogger()
			if !noProgress {
				cfg.Progress = cmd.ErrOrStderr()
			}
			return gamebench.RunRestart(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "matches 20 times shorter")
	f.Float64SliceVar(&cfg.Minutes, "minutes", []float64{1, 10, 60}, "simulated lengths of the matches, in minutes")
	f.IntVar(&cfg.Runs, "runs", 3, "kills and restarts per match")
	f.IntVar(&cfg.Players, "players", 20, "scripted players feeding commands while a match is built")
	f.IntVar(&cfg.BuildRate, "build-rate", 3000, "the ticker's rate while a match is built (ticks/s; the fsynced markers bound it)")
	f.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&cfg.Dir, "dir", "", "parent `DIR` of the data directories (default: the system temp dir)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress on stderr")
	return cmd
}
