package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, LogTick: faultsTick, SuspectTicks: faultsSuspect,
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
	rep, err := cluster.Play(ctx, c, cluster.Options{Bots: 12, Rate: 5, Pause: true, Out: testWriter{t}})
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
