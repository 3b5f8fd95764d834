package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// TestFrontEndsRealProcesses runs one world with no sector in any front
// end: NATS (in the test process), a log cluster (3 sequencing replicas
// and 2 shards, logd), 2 sector workers ('broadside sector --ticker') and
// 2 front ends ('serve --world nats://... --log'). Bots play through
// front end A; a player of the test's own connects to front end B. Every
// bot command must be acknowledged and seen applied through A (its
// applied commands come from the workers' frames); the test's player must
// see its state updates' ticks advance, its own ship appear after its
// join and the bots' ships of the other front end beside it, and its
// throttle command acknowledged and then applied (its ship's throttle in
// the state). It prints the front-end line.
func TestFrontEndsRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	ca, err := transport.LoadOrCreateDevCA(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	// The log clients' certificate exists before any process starts (a
	// worker or front end would race the log nodes for it).
	if err := mesh.EnsureDevClientCert(tlsDir, ca); err != nil {
		t.Fatal(err)
	}
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	natsURL := ns.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, closeCo, err := natscoord.DialConfig(ctx, natsURL, natscoord.Config{Cluster: "broadside", Replicas: 1}, natscoord.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeCo()
	conn, err := natscoord.Connect(natsURL, natscoord.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsworld.OpenLeases(ctx, js, natsworld.LeasesConfig{World: 1, Worker: "observer", Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsworld.OpenSnapshotStore(ctx, js, natsworld.SnapshotStoreConfig{World: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsworld.OpenLineageStore(ctx, js, natsworld.LineageStoreConfig{World: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}

	ids := []msg.NodeID{1, 2, 3, 101, 102}
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%d=127.0.0.1:%d", id, freeUDPPort(t)))
	}
	peerFlag := strings.Join(parts, ",")
	var procs []*proc
	var names []string
	start := func(name string, args ...string) *proc {
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lf.Close() })
		p := &proc{log: lf, args: args}
		p.start(t)
		procs, names = append(procs, p), append(names, name)
		return p
	}
	defer func() {
		for _, p := range procs {
			p.kill()
		}
		if t.Failed() {
			for _, n := range names {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				lines := strings.Split(string(b), "\n")
				t.Logf("%s log tail:\n%s", n, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	}()
	for _, id := range ids {
		role := "seq"
		if id >= cmdlog.FirstShardID {
			role = "shard"
		}
		start(fmt.Sprintf("node-%d", id), "logd", "--role", role, "--id", fmt.Sprint(id), "--peers", peerFlag,
			"--data", filepath.Join(dir, fmt.Sprint(id)), "--tls-dir", tlsDir, "--coord", natsURL,
			"--tick", faultsTick, "--suspect-ticks", faultsSuspect)
	}
	logFlags := []string{"--log-peers", peerFlag, "--log-tls-dir", tlsDir, "--log-coord", natsURL}
	game := []string{"--world-size", "1000", "--islands", "4"}
	for _, w := range []string{"w1", "w2"} {
		start(w, append(append([]string{"sector", "--nats", natsURL, "--worker", w}, game...), logFlags...)...)
	}
	// The secret exists before the front ends start (each would create
	// its own otherwise).
	secretFile := filepath.Join(dir, "server.secret")
	secret, err := server.LoadOrCreateSecret(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	// Front end A answers admin queries (lineage from the shared store,
	// the hashes of its frames) and records the match from the log.
	adminA, recording := freeTCPAddr(t), filepath.Join(dir, "fe-A.bsr")
	for _, fe := range []string{"A", "B"} {
		addrs[fe] = fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
		admin := []string{"--admin-addr", ""}
		if fe == "A" {
			admin = []string{"--admin-addr", adminA, "--record", recording}
		}
		start("frontend-"+fe, append(append(append([]string{"serve", "--dev", "--listen", addrs[fe], "--tls-dir", tlsDir,
			"--secret-file", secretFile, "--data", filepath.Join(dir, "fe-"+fe), "--log", "--world", natsURL, "--ticker"}, admin...), game...), logFlags...)...)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range []string{"frontend-A", "frontend-B"} {
		for {
			b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
			if bytes.Contains(b, []byte("listening on")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The test's player on front end B.
	const me = 900
	tok, err := server.IssueToken(secret, server.Claims{Player: "tester", PlayerID: me, Audience: server.AudiencePlayer, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{Addr: addrs["B"], TLS: ca.ClientTLS(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Bots on front end A, meanwhile.
	type botsOut struct {
		out []byte
		err error
	}
	botsDone := make(chan botsOut, 1)
	jsonFile := filepath.Join(dir, "bots.json")
	go func() {
		cmd := exec_(ctx, "bots", "--server", addrs["A"], "--ca", filepath.Join(tlsDir, transport.DevCACertFile),
			"--secret-file", secretFile, "--n", "4", "--rate", "5", "--duration", "10s", "--json", jsonFile)
		out, err := cmd.CombinedOutput()
		botsDone <- botsOut{out, err}
	}()

	var (
		tr                       broadside.StateTracker
		firstTick, lastTick      uint64
		updates                  int
		joinSeq, throttleSeq     uint64
		joinAcked, throttleAcked bool
		sawMe, sawOthers         int
		throttleApplied          bool
	)
	// The client drops verdicts nobody is reading: read them on their own.
	var rmu sync.Mutex
	stored := map[uint64]bool{}
	go func() {
		for r := range c.Results() {
			rmu.Lock()
			stored[r.Seq] = r.Status.Stored()
			rmu.Unlock()
		}
	}()
	isStored := func(seq uint64) bool {
		rmu.Lock()
		defer rmu.Unlock()
		return seq != 0 && stored[seq]
	}
	if joinSeq, err = c.Send(broadside.ToGameCommand(broadside.Join())); err != nil {
		t.Fatal(err)
	}
	until := time.After(40 * time.Second)
loop:
	for {
		select {
		case <-until:
			break loop
		case u := <-c.Updates():
			joinAcked, throttleAcked = isStored(joinSeq), isStored(throttleSeq)
			f, err := tr.Apply(u.Tick, u.BaseTick, u.Payload)
			if err != nil {
				continue // a delta against a tick not held: the server sends a full state next
			}
			if firstTick == 0 {
				firstTick = u.Tick
			}
			if u.Tick < lastTick {
				t.Fatalf("state update of tick %d after tick %d", u.Tick, lastTick)
			}
			lastTick, updates = u.Tick, updates+1
			c.AckState(u.Tick)
			ship, ok := f.Ship(me)
			if !ok {
				continue
			}
			sawMe++
			if len(f.Ships) > 1 {
				sawOthers = max(sawOthers, len(f.Ships)-1)
			}
			if throttleSeq == 0 && sawMe > 5 {
				if throttleSeq, err = c.Send(broadside.ToGameCommand(broadside.Throttle(70))); err != nil {
					t.Fatal(err)
				}
			}
			if throttleSeq != 0 && u.LastAppliedSeq >= throttleSeq && ship.Throttle == 70 {
				throttleApplied = true
			}
			if throttleApplied && throttleAcked && sawOthers >= 4 && updates >= 90 {
				break loop
			}
		}
	}
	t.Logf("front end B: %d state updates, ticks %d..%d, my ship in %d, others seen %d; join acked %v, throttle acked %v applied %v",
		updates, firstTick, lastTick, sawMe, sawOthers, joinAcked, throttleAcked, throttleApplied)
	switch {
	case updates < 30 || lastTick < firstTick+30:
		t.Fatalf("front end B: %d state updates over ticks %d..%d", updates, firstTick, lastTick)
	case !joinAcked || sawMe == 0:
		t.Fatalf("join acked %v, own ship seen in %d updates", joinAcked, sawMe)
	case !throttleAcked || !throttleApplied:
		t.Fatalf("throttle command: acked %v, applied %v", throttleAcked, throttleApplied)
	case sawOthers < 4:
		t.Fatalf("saw %d of the 4 bots' ships of front end A", sawOthers)
	}
	// SIGKILL a worker mid-match: its sectors' parts stop until the other
	// worker takes them over; the player on B must go on receiving state
	// (the missing parts filled meanwhile).
	for i, n := range names {
		if n == "w2" {
			procs[i].kill()
		}
	}
	killed, killTick, loopTick := time.Now(), lastTick, lastTick
	var maxGap time.Duration
	lastAt := killed
	for time.Since(killed) < 3*time.Second {
		select {
		case u := <-c.Updates():
			if _, err := tr.Apply(u.Tick, u.BaseTick, u.Payload); err != nil {
				continue
			}
			if u.Tick < lastTick {
				t.Fatalf("state update of tick %d after tick %d", u.Tick, lastTick)
			}
			lastTick = u.Tick
			c.AckState(u.Tick)
			maxGap, lastAt = max(maxGap, time.Since(lastAt)), time.Now()
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("after w2's SIGKILL: ticks %d..%d in 3 s, the longest wait for a state update %v", killTick, lastTick, maxGap)
	// The gap is the lease expiry (300 ms TTL and its margin), the
	// takeover and the part timeout (250 ms); a loaded machine stretches
	// each.
	if lastTick < killTick+30 || maxGap > 2500*time.Millisecond {
		t.Fatalf("after w2's SIGKILL: ticks %d..%d in 3 s, an update waited for %v", killTick, lastTick, maxGap)
	}
	bo := <-botsDone
	if bo.err != nil {
		t.Fatalf("bots: %v\n%s", bo.err, bo.out)
	}
	rep := readBotsReport(t, jsonFile)
	// Each bot's last commands may be in flight when it stops (sent,
	// acknowledged, their tick not yet seen: up to 4 each, 0.8 s).
	if rep.Sent == 0 || rep.Acked != rep.Sent || rep.Applied < rep.Acked-int64(4*rep.Bots) || rep.UpdatesPerSec < 20 {
		t.Fatalf("bots through front end A: sent %d, acked %d, applied %d, %.1f updates/s\n%s", rep.Sent, rep.Acked, rep.Applied, rep.UpdatesPerSec, bo.out)
	}
	// Front end A's admin: a lineage query answered from the shared store
	// (the workers record it there), and the hashes of its frames.
	whyArgs := []string{"lineage", "why", "--entity", fmt.Sprintf("ship:%d", me), "--tick", fmt.Sprint(loopTick), "--depth", "-1"}
	whyServer, err := exec_(ctx, append(whyArgs, "--server", "http://"+adminA)...).CombinedOutput()
	if err != nil || !bytes.Contains(whyServer, []byte("ship:900")) {
		t.Fatalf("lineage why --server (front end A): %v\n%s", err, whyServer)
	}
	t.Logf("lineage why --server (front end A):\n%s", whyServer)
	feHashes := fetchHashes(t, adminA)
	// The log export through A's admin address makes a recording that
	// verifies.
	exported := filepath.Join(dir, "fe-A-export.bsr")
	for _, args := range [][]string{{"replay", "export", "--server", adminA, "-o", exported, "--no-progress"}, {"replay", "verify", exported, "--no-progress"}} {
		if b, err := exec_(ctx, args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
	}
	// The front ends stop on SIGINT and say what they assembled; one of
	// them ticked the world (no worker competes for the Ticker's lease).
	var feLines []string
	ticked := false
	for i, n := range names {
		if !strings.HasPrefix(n, "frontend-") {
			continue
		}
		p := procs[i]
		p.cmd.Process.Signal(os.Interrupt)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		p.cmd = nil
		b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
		ticked = ticked || bytes.Contains(b, []byte("holding the ticker lease"))
		var line string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "front end: ") {
				line = strings.TrimPrefix(l, "front end: ")
			}
		}
		var ticks, filled uint64
		if _, err := fmt.Sscanf(line, "%d ticks assembled (%d sector parts filled", &ticks, &filled); err != nil || ticks < uint64(lastTick-firstTick) {
			t.Fatalf("%s: %q (%v)", n, line, err)
		}
		lat := line[strings.LastIndex(line, " ")+1:]
		feLines = append(feLines, fmt.Sprintf("%s %d ticks, %d parts filled, frame latency p50/p99/max %s", strings.TrimPrefix(n, "frontend-"), ticks, filled, lat))
	}
	if !ticked {
		t.Fatal("no front end held the Ticker's lease")
	}
	// A's recording (its own runners re-simulating the log) verifies, has
	// the hashes A published from the workers' frames, and answers the
	// lineage query as A did from the shared store.
	if b, err := exec_(ctx, "replay", "verify", recording, "--no-progress").CombinedOutput(); err != nil {
		t.Fatalf("replay verify %s: %v\n%s", recording, err, b)
	}
	whyRec, err := exec_(ctx, append(whyArgs, "--recording", recording)...).CombinedOutput()
	if err != nil || !bytes.Equal(whyRec, whyServer) {
		t.Fatalf("lineage why: front end A (shared store) answered\n%s\nthe recording (%v)\n%s", whyServer, err, whyRec)
	}
	r, err := bsr.Open(recording)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sameHashes := 0
	for k, h := range feHashes {
		if k[0] < r.FirstTick() || k[0] > r.LastTick() {
			continue
		}
		want, err := r.Hash(uint32(k[1]), k[0])
		if err != nil || want != h {
			t.Fatalf("tick %d sector %d: front end A published %016x, its recording has %016x (%v)", k[0], k[1], h, want, err)
		}
		sameHashes++
	}
	if sameHashes < 3*int(lastTick-firstTick) { // 4 sectors; a takeover's late frames may be lost
		t.Fatalf("%d of front end A's hashes checked against its recording (ticks %d..%d of %d sectors)", sameHashes, firstTick, lastTick, 4)
	}
	feLines = append(feLines, fmt.Sprintf("A's /world/hashes equal its recording's at %d sector-ticks, lineage why --server equals the recording's, its log export verifies", sameHashes))
	fmt.Printf("frontend: 2 workers, 2 front ends (%s): bots on A sent %d, acked %d, applied %d, %.1f updates/s; a player on B saw ticks %d..%d in %d updates, the bots' %d ships, its command acked and applied; worker w2 SIGKILLed: ticks %d..%d in the next 3 s, longest wait for an update %v\n",
		strings.Join(feLines, "; "), rep.Sent, rep.Acked, rep.Applied, rep.UpdatesPerSec, firstTick, loopTick, updates, sawOthers, killTick, lastTick, maxGap.Round(time.Millisecond))
}

// exec_ returns this test binary run as 'broadside args...'.
func exec_(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	return cmd
}

// readBotsReport reads the JSON report of 'broadside bots --json'.
func readBotsReport(t *testing.T, path string) bots.Report {
	t.Helper()
	var rep bots.Report
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// fetchHashes returns what GET /world/hashes answers on admin: the hash of
// each (tick, sector).
func fetchHashes(t *testing.T, admin string) map[[2]uint64]uint64 {
	t.Helper()
	out := map[[2]uint64]uint64{}
	c := http.Client{Timeout: 5 * time.Second}
	for from := uint64(1); ; {
		resp, err := c.Get(fmt.Sprintf("http://%s/world/hashes?from=%d", admin, from))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/world/hashes: %s %v\n%s", resp.Status, err, b)
		}
		next := from
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var tick, sector, hash, pos uint64
			if _, err := fmt.Sscanf(l, "%d %d %x %d", &tick, &sector, &hash, &pos); err == nil {
				out[[2]uint64{tick, sector}] = hash
				next = max(next, tick+1)
			}
		}
		if next-from < 10000 { // a page short of the most one lists: the newest tick reached
			return out
		}
		from = next
	}
}
