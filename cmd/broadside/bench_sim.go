package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/anoptic/broadside/internal/gamebench"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/spf13/cobra"
)

func newBenchSimCmd() *cobra.Command {
	var cfg gamebench.SimConfig
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Benchmark simulation shards: tick rate, snapshots, replay and recovery",
		Long: `Benchmark Broadside's simulation shards (replay.Runner, one per sector of the
sample game) on an in-memory command log, with snapshots in Pebble:

  1. generation: 1,000 bot ships (about 10,000 cannonballs in the air) on the
     default 8 km sea in 2 x 2 sectors, ticked as fast as the shards go, in
     lockstep (each tick's bot commands, then TICK(n), then all four shards
     step in parallel). Gives the world's ticks/s, the snapshot capture pause
     (the only pause of the tick loop) and the compressed sizes of full and
     incremental snapshots, with snapshots taken by the adaptive policy for
     the recovery target.
  2. recovery: after 1, 10 and 60 simulated minutes, each of the four shards
     is killed in turn and recovered by the supervisor (restore the newest
     snapshot chain into a fresh sim, replay the log to where the world is,
     check every replayed hash); the median time from the kill to live again.
     The log is trimmed behind the snapshots as the recording grows.
  3. replay: the last stretch of the recording is replayed from snapshots,
     each shard alone and the whole world in parallel, as a multiple of real
     time (30 ticks/s).
  4. live: the world continues in real time (a Ticker at 30 Hz, scripted bots)
     on a restarted supervisor; the tick latency of the healthy shards (from
     TICK(n) appended to shard stepped) is measured in one-second slots that
     alternate between no recovery and a kill of shard 0 at the slot's
     start (so that the machine's other load weighs on both alike); the
     ratio of their p99s.

Output: a table on stdout, progress on stderr, --json FILE with the keys
ticks_per_sec, capture_pause_p99_us, snapshot_full_bytes,
snapshot_incremental_bytes, replay_speedup (whole world), recovery_ms
({"1","10","60"}: minutes of recording) and healthy_tick_p99_ratio, and
--png FILE with recovery time against recording length and the healthy
shards' tick latency percentiles. --quick divides the recording lengths by 20
(3 s, 30 s, 3 min; the keys stay "1", "10", "60") and shortens the live
phase (10 slots instead of 30), to finish in under a minute on 2 cores; a
full run takes a few minutes.`,
		Example: `  broadside bench sim --quick
  broadside bench sim --json sim.json --png sim.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = quietLogger()
			if !noProgress {
				cfg.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\n$ broadside %s\n", strings.Join(os.Args[1:], " "))
			return gamebench.RunSim(ctx, cfg, out)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cfg.Quick, "quick", false, "recordings 20 times shorter and short live windows (under a minute)")
	f.StringVar(&cfg.JSONPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&cfg.PNGPath, "png", "", "write recovery time and tick latency charts as a PNG to `FILE`")
	f.IntVar(&cfg.Ships, "ships", 1000, "bot ships in the world")
	f.DurationVar(&cfg.RecoveryTarget, "recovery-target", snapshot.DefaultRecoveryTarget, "recovery time target of the snapshot policy")
	f.StringVar(&cfg.Dir, "dir", "", "parent `DIR` of the snapshot store's temporary directory (default: the system temp dir)")
	f.StringVar(&cfg.ReplayProfile, "replay-profile", "", "write a CPU profile of the whole world's replay (phase 3) to `FILE` (go tool pprof)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress on stderr")
	return cmd
}
