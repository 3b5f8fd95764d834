package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/internal/dst"
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	var o logDemoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the Broadside demo",
		Long: `Run the Broadside demo.

Until the game server lands, 'broadside demo' is 'broadside demo log': a
3-replica, 2-shard command log on loopback QUIC in this process, appended to by
several clients while its sequencing leader crashes and restarts, then read
back and checked. 'broadside demo dst' runs the same protocol under the
deterministic simulator with many more faults.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	o = logDemoOptions{clients: 3, concurrency: 16, duration: 6 * time.Second, size: 100}
	cmd.AddCommand(newDemoLogCmd(), newDemoDSTCmd())
	return cmd
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
