package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	caFile := filepath.Join(dir, "tls", transport.DevCACertFile)
	natsTLS, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "nats-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := natscoord.StartCluster(3, filepath.Join(dir, "nats"), natscoord.ClusterOptions{
		Auth: natscoord.ServerAuth{User: "broadside", Password: "s3cret", TLS: natsTLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Shutdown()
	natsURL := nc.URL()
	connOpts := natscoord.ConnOptions{User: "broadside", Password: "s3cret", CAFile: caFile}
	natsFlags := []string{"--coord", natsURL, "--coord-replicas", "3", "--nats-user", "broadside",
		"--nats-password-file", pwFile, "--nats-ca", caFile}

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

	ids := []msg.NodeID{1, 2, 3, 101, 102}
	peers := map[msg.NodeID]string{}
	var parts []string
	for _, id := range ids {
		peers[id] = fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
		parts = append(parts, fmt.Sprintf("%d=%s", id, peers[id]))
	}
	peerFlag := strings.Join(parts, ",")
	procs := map[msg.NodeID]*proc{}
	for _, id := range ids {
		args := []string{"logd", "--role", "seq", "--id", fmt.Sprint(id), "--peers", peerFlag,
			"--data", filepath.Join(dir, fmt.Sprint(id)), "--tls-dir", filepath.Join(dir, "tls"),
			"--tick", faultsTick, "--suspect-ticks", faultsSuspect}
		if id >= cmdlog.FirstShardID {
			args[2] = "shard"
			args = append(args, "--shard-store", "jetstream", "--shard-replicas", "3")
		}
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		p := &proc{log: lf, args: append(args, natsFlags...)}
		p.start(t)
		procs[id] = p
	}
	defer func() {
		for _, p := range procs {
			p.kill()
		}
		if t.Failed() {
			if keep := os.Getenv("BROADSIDE_KEEP_LOGS"); keep != "" {
				exec.Command("cp", "-r", dir, keep).Run()
			}
			for _, id := range ids {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
				lines := strings.Split(string(b), "\n")
				t.Logf("node %d log tail:\n%s", id, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	}()

	_, client := mustMutualTLS(t, ca)

	const clients, perClient = 2, 3
	var mu sync.Mutex
	var records []*appendRecord
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: dialCoord(), ClientTLS: client, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r := &appendRecord{data: fmt.Sprintf("c%d-g%d-%d", c, g, i), start: time.Now()}
					actx, acancel := context.WithTimeout(ctx, 20*time.Second)
					err := rc.Append(actx, []byte(r.data))
					acancel()
					r.end, r.acked = time.Now(), err == nil
					mu.Lock()
					records = append(records, r)
					mu.Unlock()
					if r.acked {
						acked.Add(1)
					}
				}
			}()
		}
	}
	// Stable-gp advances only once both shards stored the positions, so a
	// read at a fresh tail proves the shards (on JetStream) are live again,
	// not just the replicas. A fresh client reads, as in the faults test:
	// a client's link to a shard's previous life is found dead only by the
	// QUIC idle timeout (30 s); the restarted shard cannot announce itself
	// to clients.
	fresh := func() *cmdlog.RemoteClient {
		t.Helper()
		rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: co, ClientTLS: client, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	waitProgress := func(n int64, what string) {
		t.Helper()
		target := acked.Load() + n
		for acked.Load() < target {
			if ctx.Err() != nil {
				t.Fatalf("after %s: only %d acknowledged appends, waiting for %d", what, acked.Load(), target)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rc := fresh()
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
	close(stop)
	wg.Wait()

	rc := fresh()
	defer rc.Close()
	tail, err := rc.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := rc.Subscribe(1)
	pos := map[string]uint64{}
	duplicated := 0
	for sub.Position() <= tail {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("read %d of %d: %v", sub.Position(), tail, err)
		}
		if _, dup := pos[string(e.Record.Data)]; dup {
			duplicated++
		}
		pos[string(e.Record.Data)] = e.Pos
	}
	lost, nAcked := 0, 0
	for _, r := range records {
		if r.acked {
			nAcked++
			if _, ok := pos[r.data]; !ok {
				lost++
				if lost < 5 {
					t.Errorf("acknowledged append %q lost", r.data)
				}
			}
		}
	}
	line := fmt.Sprintf("jetstream-shard: %d kills (shard SIGKILLs, one with its disk deleted) and %d NATS node stop, %d acked, %d lost, %d duplicated (%d positions)",
		kills, natsStops, nAcked, lost, duplicated, tail)
	fmt.Println(line)
	t.Log(line)
	if lost > 0 || duplicated > 0 {
		t.Fatal(line)
	}
}
