package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/cluster"
	"github.com/anoptic/broadside/demo/match"
	"github.com/anoptic/broadside/internal/dst"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	var o match.Options
	var jsonFile, durability, keyFile string
	var clustered bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole Broadside match in one process: log cluster, game server, bots, faults, checks",
		Long: `Run a whole Broadside match in this process, pure Go, nothing to install:

  - an embedded command log cluster (3 sequencing replicas, 2 shards, loopback QUIC, Pebble),
  - a game server (QUIC, ALPN broadside/1) whose world is split in 4 sectors (sim shards),
  - --bots bots, each its own QUIC connection and token, playing from the state they receive.

Mid-match it kills one sim shard (the supervisor restores it from its
snapshots and replays the log while the other sectors keep running),
crashes the command log's sequencing leader (the log changes view; the
replica restarts later), then kills the whole server with no clean stop (no
drain, no final snapshot) and reopens it from its data directory, reporting
how long the restart took to tick and to acknowledge again (fsync durability
only: a memory-durability log cannot resume, and the demo says so). At the
end it drains the server, reads the whole log back to check that every
acknowledged command is in it exactly once, re-simulates the whole log from
scratch and compares every tick's state hash with the live run, before and
after the kill, and writes a recording for 'broadside replay' and the viewer.

--cluster runs the world on separate processes on loopback instead (each
this same binary): 3 NATS servers, 3 sequencing replicas and 2 shards, 3
sector workers and 2 front ends, with bots split across the front ends
(--bots, default 12 with --cluster, at --rate, default 5). Mid-match it
SIGKILLs a sector worker, SIGSTOPs another past its leases, SIGKILLs a front
end, a NATS server and the sequencing leader, restarting each; then it
checks that every acknowledged command is in the log exactly once and that
every frame the workers published matches a re-simulation of the whole log,
and reports the takeover times.

'broadside demo log' and 'broadside demo dst' demonstrate the command log
alone (real cluster, and the deterministic simulator).`,
		Example: `  broadside demo
  broadside demo --duration 30s --bots 50 --json /tmp/d.json
  broadside demo --cluster`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clustered {
				return runClusterDemo(cmd, o, jsonFile)
			}
			if o.Bots <= 0 || o.Duration < 3*time.Second || o.Rate <= 0 {
				return fmt.Errorf("need --bots > 0, --rate > 0 and --duration of at least 3s")
			}
			d, err := parseDurability(durability)
			if err != nil {
				return err
			}
			if o.Signer, err = bsr.LoadSigner(keyFile); err != nil {
				return err
			}
			o.Durability, o.Out = d, cmd.OutOrStdout()
			rep, err := match.Run(cmd.Context(), o)
			if jsonFile != "" && rep.Ticks > 0 {
				if jerr := report.WriteJSONFile(jsonFile, rep); jerr != nil && err == nil {
					err = jerr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 30*time.Second, "length of the match")
	f.IntVar(&o.Bots, "bots", 50, "number of bots (players)")
	f.Float64Var(&o.Rate, "rate", 10, "commands per second per bot")
	f.Uint64Var(&o.Seed, "seed", 1, "world and bot seed")
	f.StringVar(&jsonFile, "json", "", "write the summary as JSON to `FILE` (keys acked, applied, lost, recoveries, recovery_ms, determinism_ok, recording, ...)")
	f.StringVar(&o.Dir, "dir", "", "working directory (default: a new temporary one; the data under it is removed, the recording kept)")
	f.StringVar(&o.Recording, "recording", "", "where to write the recording (default: match.bsr in the working directory)")
	f.StringVar(&durability, "durability", "fsync", durabilityUsage)
	f.StringVar(&keyFile, "key", "", "sign the recording's log checkpoints with this signer key `FILE` (broadside keygen)")
	f.BoolVar(&clustered, "cluster", false, "run the world on separate processes on loopback (NATS, logd, sector workers, front ends) and kill one of each role")
	f.BoolVar(&o.NoFaults, "no-faults", false, "do not kill a sim shard, crash the sequencing leader or kill the whole server")
	cmd.AddCommand(newDemoLogCmd(), newDemoDSTCmd())
	return cmd
}

// runClusterDemo runs 'demo --cluster' (demo/cluster).
func runClusterDemo(cmd *cobra.Command, o match.Options, jsonFile string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("bots") {
		o.Bots = 12
	}
	if !cmd.Flags().Changed("rate") {
		o.Rate = 5
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := cluster.Demo(ctx, cluster.DemoOptions{Executable: exe, Dir: o.Dir, Bots: o.Bots, Rate: o.Rate, Duration: o.Duration, Out: cmd.OutOrStdout()})
	if jsonFile != "" && rep.Acked > 0 {
		if jerr := report.WriteJSONFile(jsonFile, rep); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

func newDemoDSTCmd() *cobra.Command {
	var opts dst.Options
	var fsync bool
	var trace bool
	cmd := &cobra.Command{
		Use:   "dst",
		Short: "Run the command log's protocol cores under the deterministic simulator",
		Long: `Run the command log's protocol cores (3 sequencing replicas,
2 shards, 3 clients) under the deterministic simulator: concurrent appends,
injected faults (crashes, partitions, dropped, duplicated and reordered
messages), view changes, reads and tail checks; then it reads the log back and
checks that every acknowledged append is there exactly once, in real-time
order, and that the clients' histories are linearizable. The same seed always
replays the same run.`,
		Example: `  broadside demo dst
  broadside demo dst --seed 127 --trace`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Seed == 0 {
				opts.Seed = rand.Uint64N(1_000_000) + 1
			}
			if fsync {
				opts.Durability = seq.Fsync
			}
			return runSimDemo(cmd.OutOrStdout(), opts, trace)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&opts.Seed, "seed", 0, "simulation seed (0: pick one at random; the seed is printed)")
	f.IntVar(&opts.Replicas, "replicas", 3, "sequencing replicas")
	f.IntVar(&opts.Shards, "shards", 2, "log shards")
	f.IntVar(&opts.Clients, "clients", 3, "appending clients")
	f.IntVar(&opts.AppendsPerClient, "appends", 100, "appends per client")
	f.BoolVar(&fsync, "fsync", false, "replicas acknowledge after a write-ahead log sync (every replica may crash)")
	f.BoolVar(&trace, "trace", false, "print every event, not only faults and view changes")
	return cmd
}

func runSimDemo(w io.Writer, opts dst.Options, all bool) error {
	var events bytes.Buffer
	opts.Trace = &events
	mode := "memory"
	if opts.Durability == seq.Fsync {
		mode = "fsync"
	}
	fmt.Fprintf(w, "Broadside demo: the command log's protocol cores under the deterministic simulator\n")
	fmt.Fprintf(w, "seed %d: %d sequencing replicas, %d shards, %d clients, durability %s (time is simulated ticks)\n\n",
		opts.Seed, opts.Replicas, opts.Shards, opts.Clients, mode)
	res := dst.Run(opts)

	fmt.Fprintf(w, "events:\n")
	lines := strings.Split(strings.TrimSpace(events.String()), "\n")
	shown := 0
	for _, l := range lines {
		if l == "" {
			continue
		}
		if !all && shown >= 40 {
			fmt.Fprintf(w, "  ... %d more (use --trace)\n", len(lines)-shown)
			break
		}
		fmt.Fprintf(w, "  %s\n", l)
		shown++
	}
	if shown == 0 {
		fmt.Fprintf(w, "  (none)\n")
	}
	fmt.Fprintf(w, "\nresult after %d ticks:\n", res.Ticks)
	fmt.Fprintf(w, "  appends       %d issued, %d acknowledged\n", res.Appends, res.Acked)
	fmt.Fprintf(w, "  reads         %d reads returned %d entries; %d checkTails\n", res.Reads, res.ReadEntries, res.Tails)
	fmt.Fprintf(w, "  faults        %d crashes, %d partitions, %d of %d messages dropped, %d duplicated, all delayed and reordered\n",
		res.Crashes, res.Partitions, res.Dropped, res.Sent, res.Duplicated)
	fmt.Fprintf(w, "  view changes  %d\n", res.ViewChanges)
	fmt.Fprintf(w, "  final log     %d positions, read back from the shards\n", res.FinalTail)
	for _, e := range res.Sample {
		fmt.Fprintf(w, "      position %-5d record %-9s %q\n", e.Pos, e.Record.ID, e.Record.Data)
	}
	if !res.OK() {
		fmt.Fprintf(w, "\nVIOLATIONS:\n")
		for _, v := range res.Violations {
			fmt.Fprintf(w, "  %s\n", v)
		}
		return fmt.Errorf("seed %d broke the log's invariants (replay: broadside demo dst --seed %d --trace)", opts.Seed, opts.Seed)
	}
	lin := "linearizable (porcupine)"
	if !res.Checked {
		lin = "linearizability check timed out"
	}
	fmt.Fprintf(w, "  checks        every acknowledged append exactly once, no duplicates, real-time order kept,\n")
	fmt.Fprintf(w, "                no position changed after it was read, %s\n", lin)
	return nil
}
