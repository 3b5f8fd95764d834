package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/logd"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// TestJetStreamShardRealProcesses runs a log cluster as separate logd
// processes on loopback whose two shards store in JetStream
// (--shard-store jetstream) on a 3-node NATS cluster that demands a user,
// a password and TLS. Under appends from several clients it SIGKILLs a
// shard and restarts it with its data directory deleted (a lost disk),
// SIGKILLs the other shard, stops the NATS node leading a shard's stream
// and restarts it, and SIGKILLs the first shard again; then it reads the
// whole log back and checks that every acknowledged append is there exactly
// once.
func TestJetStreamShardRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	nc := startSecureNATS(t, dir, ca)
	natsURL, connOpts := nc.URL(), nc.conn
	natsFlags := append([]string{"--coord", natsURL, "--coord-replicas", "3"}, nc.flags...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dialCoord := func() coord.Coordinator {
		c, closeFn, err := natscoord.DialConfig(ctx, natsURL, natscoord.Config{Cluster: "broadside", Replicas: 3}, connOpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeFn)
		return c
	}
	// The view bucket (R3) exists before the nodes start: five processes
	// creating it at once stall each other for seconds on this machine.
	co := dialCoord()

	lc := startLogCluster(t, dir, func(id msg.NodeID) []string {
		args := []string{"--tls-dir", filepath.Join(dir, "tls"), "--tick", faultsTick, "--suspect-ticks", faultsSuspect}
		if id >= cmdlog.FirstShardID {
			args = append(args, "--shard-store", "jetstream", "--shard-replicas", "3")
		}
		return append(args, natsFlags...)
	})
	procs := lc.procs

	_, client := mustMutualTLS(t, ca)

	const clients, perClient = 2, 3
	var rcs []*cmdlog.RemoteClient
	for range clients {
		rcs = append(rcs, lc.dial(t, dialCoord(), client))
	}
	load := startAppends(ctx, rcs, perClient)
	acked := &load.acked
	// Stable-gp advances only once both shards stored the positions, so a
	// read at a fresh tail proves the shards (on JetStream) are live again,
	// not just the replicas. A fresh client reads, as in the faults test:
	// a client's link to a shard's previous life is found dead only by the
	// QUIC idle timeout (30 s); the restarted shard cannot announce itself
	// to clients.
	waitProgress := func(n int64, what string) {
		t.Helper()
		load.waitAcked(t, ctx, n, what)
		rc := lc.client(t, co, client)
		defer rc.Close()
		start := time.Now()
		tail, err := rc.CheckTail(ctx)
		if err != nil {
			t.Fatalf("after %s: CheckTail: %v", what, err)
		}
		if _, err := rc.Read(ctx, tail, 1); err != nil {
			t.Fatalf("after %s: read %d: %v", what, tail, err)
		}
		t.Logf("after %s: position %d readable %v after its CheckTail", what, tail, time.Since(start).Round(time.Millisecond))
	}
	kills, natsStops := 0, 0
	killRestart := func(id msg.NodeID, wipe bool) {
		t.Helper()
		procs[id].kill()
		kills++
		what := "SIGKILL shard " + fmt.Sprint(id)
		if wipe {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprint(id))); err != nil {
				t.Fatal(err)
			}
			what += ", its data directory deleted"
		}
		t.Logf("%s at %d acked", what, acked.Load())
		time.Sleep(500 * time.Millisecond)
		procs[id].start(t)
	}
	streamLeader := func(id msg.NodeID) int {
		t.Helper()
		conn, err := natscoord.Connect(natsURL, connOpts)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		js, _ := jetstream.New(conn)
		st, err := js.Stream(ctx, logd.ShardStreamName("broadside", id))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("shard %d stream: %d replicas (%+v), want 3", id, info.Config.Replicas, info.Cluster)
		}
		for i, n := range nc.Nodes {
			if n.Server().Name() == info.Cluster.Leader {
				return i
			}
		}
		t.Fatalf("shard %d stream leader %q unknown", id, info.Cluster.Leader)
		return -1
	}

	waitProgress(3000, "start")
	killRestart(101, true)
	waitProgress(3000, "shard 101 kill")
	killRestart(102, false)
	waitProgress(3000, "shard 102 kill")
	leader := streamLeader(101)
	t.Logf("stop NATS node %d (leader of shard 101's stream) at %d acked", leader+1, acked.Load())
	nc.StopNode(leader)
	natsStops++
	waitProgress(2000, "NATS node stop")
	if err := nc.RestartNode(leader); err != nil {
		t.Fatal(err)
	}
	waitProgress(2000, "NATS node restart")
	killRestart(101, false)
	waitProgress(3000, "shard 101 second kill")
	records := load.finish()

	pos, duplicated, tail := readWholeLog(t, ctx, lc.dial(t, co, client))
	nAcked, lost := lostAcked(t, records, pos)
	line := fmt.Sprintf("jetstream-shard: %d kills (shard SIGKILLs, one with its disk deleted) and %d NATS node stop, %d acked, %d lost, %d duplicated (%d positions)",
		kills, natsStops, nAcked, lost, duplicated, tail)
	fmt.Println(line)
	t.Log(line)
	if lost > 0 || duplicated > 0 {
		t.Fatal(line)
	}
}
