package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/cluster"
)

// TestClusterRealProcesses runs one world on separate processes on
// loopback (demo/cluster, as 'broadside demo --cluster' does): 3 NATS
// servers ('broadside nats', demanding a user, a password and TLS; every
// bucket R3), 3 sequencing replicas and 2 shards (logd), 3 sector workers
// ('broadside sector --ticker', one with --standby) and 2 front ends
// ('serve --world --ticker'), with bots playing on both front ends. It
// SIGKILLs a sector worker (restarted: the sectors rebalance back),
// SIGSTOPs another past its leases and SIGCONTs it, SIGKILLs a front end
// (restarted: its bots reconnect and resend), the log's sequencing leader
// and a NATS node, each restarted on its data. Then it reads the whole log
// and checks that every acknowledged command is in it exactly once, that
// every frame any worker published (the state hash of a sector at a tick)
// equals an uninterrupted re-simulation of that log, and that the paused
// worker published nothing past its successor's claim after waking. It
// prints the cluster line with the takeover times (kill to live, split
// into lease expiry, restore and replay).
func TestClusterRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// BROADSIDE_CLUSTER_KILL_TICKER=1: only the workers tick, and the
	// SIGKILLed and SIGSTOPped workers are the Ticker's holder each time.
	// BROADSIDE_CLUSTER_TICKER_GRACE sets the workers' --ticker-grace
	// ("-1ms": no bridging, to compare).
	killTicker := os.Getenv("BROADSIDE_CLUSTER_KILL_TICKER") != ""
	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, LogTick: faultsTick, SuspectTicks: faultsSuspect, WorkersTick: killTicker,
		TickerGrace: os.Getenv("BROADSIDE_CLUSTER_TICKER_GRACE"),
		Command: func(args ...string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
			return cmd
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Close()
		if keep := os.Getenv("BROADSIDE_KEEP_LOGS"); keep != "" {
			exec.Command("cp", "-r", dir, keep).Run() // passed or not: the processes' logs
		}
		if t.Failed() {
			for _, n := range c.Names() {
				t.Logf("%s log tail:\n%s", n, c.LogTail(n, 20))
			}
		}
	}()
	rep, err := cluster.Play(ctx, c, cluster.Options{Bots: 12, Rate: 5, Pause: true, KillTicker: killTicker, Out: testWriter{t}})
	fmt.Println(rep.Line())
	fmt.Println(rep.Detail())
	t.Log(rep.Line())
	t.Log(rep.Detail())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Verdict(); err != nil {
		t.Fatal(err)
	}
	if len(rep.Kills) != 4 {
		t.Fatalf("kills %v", rep.Kills)
	}
}

// testWriter writes lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-min(1, len(b))]))
	return len(b), nil
}

// TestClusterThroughput measures the world's throughput on 1, 2 and 3
// sector workers under a steady load of bots, no faults (not in make
// test: BROADSIDE_CLUSTER_BENCH=1; BROADSIDE_CLUSTER_BOTS and
// BROADSIDE_CLUSTER_RATE set the load, default 24 bots at 10/s;
// BROADSIDE_CLUSTER_WORKERS the worker counts, default 1,2,3). It
// prints a cluster-throughput line per worker count.
func TestClusterThroughput(t *testing.T) {
	if os.Getenv("BROADSIDE_CLUSTER_BENCH") == "" {
		t.Skip("a benchmark: set BROADSIDE_CLUSTER_BENCH=1")
	}
	bots, rate := 24, 10.0
	if v := os.Getenv("BROADSIDE_CLUSTER_BOTS"); v != "" {
		fmt.Sscan(v, &bots)
	}
	if v := os.Getenv("BROADSIDE_CLUSTER_RATE"); v != "" {
		fmt.Sscan(v, &rate)
	}
	counts := []int{1, 2, 3}
	if v := os.Getenv("BROADSIDE_CLUSTER_WORKERS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			var n int
			fmt.Sscan(f, &n)
			counts = append(counts, n)
		}
	}
	for _, workers := range counts {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		dir := t.TempDir()
		c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Workers: workers, LogTick: faultsTick, SuspectTicks: faultsSuspect,
			Command: func(args ...string) *exec.Cmd {
				cmd := exec.Command(os.Args[0], args...)
				cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
				return cmd
			}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		th, err := cluster.Measure(ctx, c, cluster.MeasureOptions{Bots: bots, Rate: rate, Duration: 20 * time.Second})
		if err != nil {
			for _, n := range c.Names() {
				t.Logf("%s log tail:\n%s", n, c.LogTail(n, 10))
			}
		}
		c.Close()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("cluster-throughput: " + th.String())
	}
}
