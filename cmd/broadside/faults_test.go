package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// TestMain lets the test binary stand in for the broadside binary: child
// processes started with BROADSIDE_TEST_MAIN=1 run the CLI.
func TestMain(m *testing.M) {
	if os.Getenv("BROADSIDE_TEST_MAIN") == "1" {
		os.Args = append([]string{"broadside"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

type proc struct {
	args []string
	cmd  *exec.Cmd
	log  *os.File
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], p.args...)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// The replicas' timing in the fault test: a 10 ms tick and 50 ticks of
// silence before a peer is suspected by default (no false suspicions on a
// busy shared machine); BROADSIDE_FAULTS_TIMING=5ms,6 tries the timing a
// 50 ms view change needs.
var faultsTick, faultsSuspect = func() (string, string) {
	if v := os.Getenv("BROADSIDE_FAULTS_TIMING"); v != "" {
		if tick, suspect, ok := strings.Cut(v, ","); ok {
			return tick, suspect
		}
	}
	return "10ms", "50"
}()

type appendRecord struct {
	data       string
	start, end time.Time
	acked      bool
}

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
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	tlsDir := filepath.Join(dir, "tls")
	ca, err := transport.LoadOrCreateDevCA(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
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
		role := "seq"
		if id >= cmdlog.FirstShardID {
			role = "shard"
		}
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		p := &proc{log: lf, args: []string{"logd", "--role", role, "--id", fmt.Sprint(id), "--peers", peerFlag,
			"--data", filepath.Join(dir, fmt.Sprint(id)), "--tls-dir", tlsDir, "--coord", ns.ClientURL(),
			"--tick", faultsTick, "--suspect-ticks", faultsSuspect}}
		p.start(t)
		procs[id] = p
	}
	defer func() {
		for _, p := range procs {
			p.kill()
		}
		if keep := os.Getenv("BROADSIDE_KEEP_LOGS"); keep != "" {
			exec.Command("cp", "-r", dir, keep).Run() // passed or not
		}
		if t.Failed() {
			for _, id := range ids {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
				lines := strings.Split(string(b), "\n")
				t.Logf("node %d log tail:\n%s", id, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	co := natsCoord(t, ctx, ns.ClientURL())
	_, client := mustMutualTLS(t, ca)

	// Clients append concurrently until told to stop.
	const clients, perClient = 4, 6
	var mu sync.Mutex
	var records []*appendRecord
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: natsCoord(t, ctx, ns.ClientURL()),
			ClientTLS: client, Logger: quietLogger()})
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
					r.end = time.Now()
					r.acked = err == nil
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
	waitAcked := func(n int64, what string) {
		t.Helper()
		target := acked.Load() + n
		for acked.Load() < target {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %d more acknowledged appends after %s: only %d in total", n, what, acked.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
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
		fc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: co, ClientTLS: client, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
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
	close(stop)
	wg.Wait()

	// Read everything back with a fresh client.
	rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: co, ClientTLS: client, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
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
	lost := 0
	nAcked := 0
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

func natsCoord(t *testing.T, ctx context.Context, url string) coord.Coordinator {
	t.Helper()
	c, closeFn, err := (&clusterFlags{coordURL: url, clusterName: "broadside"}).openCoordinator(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return c
}

// mustMutualTLS returns TLS configs with a client certificate (role
// client): logd refuses certificates that prove no identity.
func mustMutualTLS(t *testing.T, ca *transport.DevCA) (server, client *tls.Config) {
	t.Helper()
	s, c, err := mesh.DevNodeTLS(ca, mesh.ClientIDBase, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}
