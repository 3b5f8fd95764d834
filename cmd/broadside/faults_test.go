package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// TestFaultsRealProcesses starts 3 sequencing replicas and 2 shards as
// separate processes on loopback, appends from several clients, SIGKILLs a
// follower, a shard and the leader in turn (restarting each), and checks
// that every acknowledged append is in the log exactly once, in an order
// that respects completion order.
func TestFaultsRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	ns := startNATS(t, dir)
	tlsDir := filepath.Join(dir, "tls")
	ca, err := transport.LoadOrCreateDevCA(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	lc := startLogCluster(t, dir, func(msg.NodeID) []string {
		return []string{"--tls-dir", tlsDir, "--coord", ns.ClientURL(), "--tick", faultsTick, "--suspect-ticks", faultsSuspect}
	})
	procs := lc.procs

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	co := natsCoord(t, ctx, ns.ClientURL())
	_, client := mustMutualTLS(t, ca)

	// Clients append concurrently until told to stop.
	const clients, perClient = 4, 6
	var rcs []*cmdlog.RemoteClient
	for range clients {
		rcs = append(rcs, lc.dial(t, natsCoord(t, ctx, ns.ClientURL()), client))
	}
	load := startAppends(ctx, rcs, perClient)
	acked := &load.acked
	waitAcked := func(n int64, what string) {
		t.Helper()
		load.waitAcked(t, ctx, n, what)
	}
	waitMembers := func(n int, what string) msg.ViewRecord {
		t.Helper()
		for {
			v, _, err := co.Get(ctx)
			if err == nil && v.Active() && len(v.Members) == n {
				return v
			}
			if ctx.Err() != nil {
				t.Fatalf("after %s: view never got back to %d members (last %+v, %v)", what, n, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	kills := 0
	// For each kill, when the killed processes were gone: the summary
	// reports how long after it the first append that started later
	// completed (for a leader kill, the view change with failure
	// detection).
	type killEvent struct {
		what string
		at   time.Time
	}
	var killEvents []killEvent
	killRestart := func(id msg.NodeID, what string) {
		t.Helper()
		procs[id].kill()
		killEvents = append(killEvents, killEvent{what, time.Now()})
		kills++
		t.Logf("SIGKILL %s (node %d) at %d acked", what, id, acked.Load())
		time.Sleep(700 * time.Millisecond)
		procs[id].start(t)
	}
	// killTogether SIGKILLs several nodes in one go and restarts them
	// 0.2 s later (the double fault of issue 14).
	killTogether := func(what string, ids ...msg.NodeID) {
		t.Helper()
		for _, id := range ids {
			procs[id].kill()
			kills++
		}
		killEvents = append(killEvents, killEvent{what, time.Now()})
		t.Logf("SIGKILL %s (nodes %v) at %d acked", what, ids, acked.Load())
		time.Sleep(200 * time.Millisecond)
		for _, id := range ids {
			procs[id].start(t)
		}
	}
	// freshClient dials a new client right after a restart and times its
	// first append, CheckTail and read (the availability target of issue
	// 14 is 1 s for all three). The test fails only on a stall far beyond
	// it (the 27 s stall the issue reports), as timing on a shared machine
	// is not a verdict; the measured times are printed.
	var probes []string
	freshClient := func(what string) {
		t.Helper()
		start := time.Now()
		fc := lc.client(t, co, client)
		defer fc.Close()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		if err := fc.Append(pctx, []byte("probe after "+what)); err != nil {
			t.Fatalf("fresh client after %s: append: %v (after %v)", what, err, time.Since(start))
		}
		tAppend := time.Since(start)
		tail, err := fc.CheckTail(pctx)
		if err != nil {
			t.Fatalf("fresh client after %s: CheckTail: %v (after %v)", what, err, time.Since(start))
		}
		tTail := time.Since(start)
		if _, err := fc.Read(pctx, tail, 1); err != nil {
			t.Fatalf("fresh client after %s: read %d: %v (after %v)", what, tail, err, time.Since(start))
		}
		tRead := time.Since(start)
		line := fmt.Sprintf("%s: append %v, CheckTail %v, read %v after the restart", what,
			tAppend.Round(time.Millisecond), tTail.Round(time.Millisecond), tRead.Round(time.Millisecond))
		probes = append(probes, line)
		t.Logf("fresh client after %s", line)
	}

	waitAcked(2000, "start")
	v := waitMembers(3, "start")
	follower := v.Members[0]
	if follower == v.Leader {
		follower = v.Members[1]
	}
	killRestart(follower, "a sequencing follower")
	freshClient("follower kill")
	waitAcked(1000, "follower kill")
	waitMembers(3, "follower restart")
	killRestart(101, "a shard")
	freshClient("shard kill")
	waitAcked(1000, "shard kill")
	v = waitMembers(3, "shard restart")
	killRestart(v.Leader, "the sequencing leader")
	freshClient("leader kill")
	waitAcked(1000, "leader kill")
	v = waitMembers(3, "leader restart")
	follower = v.Members[0]
	if follower == v.Leader {
		follower = v.Members[1]
	}
	killTogether("a sequencing follower and a shard", follower, 102)
	freshClient("follower+shard kill")
	waitAcked(1000, "follower+shard kill")
	v = waitMembers(3, "follower+shard restart")
	killTogether("the sequencing leader and a shard", v.Leader, 101)
	freshClient("leader+shard kill")
	waitAcked(1000, "leader+shard kill")
	waitMembers(3, "leader+shard restart")
	waitAcked(500, "recovery")
	records := load.finish()

	// Read everything back with a fresh client.
	pos, duplicated, tail := readWholeLog(t, ctx, lc.dial(t, co, client))
	nAcked, lost := lostAcked(t, records, pos)
	// Completion order: if A completed before B started, pos(A) < pos(B).
	type ev struct {
		t     time.Time
		isEnd bool
		pos   uint64
		data  string
	}
	var evs []ev
	for _, r := range records {
		if p, ok := pos[r.data]; ok && r.acked {
			evs = append(evs, ev{r.start, false, p, r.data}, ev{r.end, true, p, r.data})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].t.Equal(evs[j].t) {
			return evs[i].t.Before(evs[j].t)
		}
		return !evs[i].isEnd && evs[j].isEnd // a start at the same instant is not after the end
	})
	var maxDone uint64
	orderViolations := 0
	for _, e := range evs {
		if e.isEnd {
			maxDone = max(maxDone, e.pos)
		} else if e.pos <= maxDone {
			orderViolations++
		}
	}
	line := fmt.Sprintf("faults: %d kills, %d acked, %d lost, %d duplicated (%d positions, %d order violations)",
		kills, nAcked, lost, duplicated, tail, orderViolations)
	fmt.Println(line)
	t.Log(line)
	for _, p := range probes {
		fmt.Println("faults: fresh client after " + p)
	}
	for _, k := range killEvents {
		var first time.Time
		for _, r := range records {
			if r.acked && r.start.After(k.at) && (first.IsZero() || r.end.Before(first)) {
				first = r.end
			}
		}
		if !first.IsZero() {
			fmt.Printf("faults: after the SIGKILL of %s, the first append started later completed %v after it\n",
				k.what, first.Sub(k.at).Round(time.Millisecond))
		}
	}
	if lost > 0 || duplicated > 0 || orderViolations > 0 {
		t.Fatal(line)
	}
}
