package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// clusterFrame is a sector frame the test received, with when.
type clusterFrame struct {
	f  natsworld.SectorFrame
	at time.Time
}

// TestClusterRealProcesses runs one world on separate processes on
// loopback: a 3-node NATS cluster (in the test process, demanding a user,
// a password and TLS; leases, snapshots and the view bucket R3), 3
// sequencing replicas and 2 shards (logd), and 3 sector workers
// ('broadside sector --ticker', so the Ticker is leased too; one with
// --standby), while bots
// append player commands to the log. It SIGKILLs a sector worker (and
// restarts it: the sectors rebalance back), SIGSTOPs another past its
// leases and SIGCONTs it, SIGKILLs the log's sequencing leader and stops
// a NATS node, each restarted. Then it reads the whole log and checks that
// every acknowledged command is in it exactly once, and that every frame
// any worker published (the state hash of a sector at a tick) equals an
// uninterrupted re-simulation of that log; and that the paused worker
// published nothing after waking. It prints the cluster line with the
// takeover times (kill to live, split into lease expiry, restore and
// replay).
func TestClusterRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	ca, err := transport.LoadOrCreateDevCA(tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(tlsDir, transport.DevCACertFile)
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
	creds := []string{"--nats-user", "broadside", "--nats-password-file", pwFile, "--nats-ca", caFile}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The R3 buckets exist before the processes start (several creating
	// one at once stall each other for seconds on this machine).
	co, closeCo, err := natscoord.DialConfig(ctx, natsURL, natscoord.Config{Cluster: "broadside", Replicas: 3}, connOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCo()
	conn, err := natscoord.Connect(natsURL, connOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	observer, err := natsworld.OpenLeases(ctx, js, natsworld.LeasesConfig{World: 1, Worker: "observer", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsworld.OpenSnapshotStore(ctx, js, natsworld.SnapshotStoreConfig{World: 1, Replicas: 3}); err != nil {
		t.Fatal(err)
	}

	// Frames and takeover reports, as a front end would receive them.
	var (
		fmu       sync.Mutex
		frames    []clusterFrame
		takeovers []natsworld.TakeoverReport
		latest    = map[uint32]uint64{}
	)
	if _, err := conn.Subscribe(natsworld.SectorsSubject(1), func(m *nats.Msg) {
		f, err := natsworld.DecodeSectorFrame(m.Data)
		if err != nil {
			t.Errorf("undecodable frame on %s: %v", m.Subject, err)
			return
		}
		fmu.Lock()
		frames = append(frames, clusterFrame{f: f, at: time.Now()})
		latest[f.Sector] = max(latest[f.Sector], f.Tick)
		fmu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Subscribe(natsworld.TakeoverSubject(1), func(m *nats.Msg) {
		r, err := natsworld.DecodeTakeoverReport(m.Data)
		if err != nil {
			t.Errorf("undecodable takeover report: %v", err)
			return
		}
		fmu.Lock()
		takeovers = append(takeovers, r)
		fmu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}

	// The log cluster.
	ids := []msg.NodeID{1, 2, 3, 101, 102}
	peers := map[msg.NodeID]string{}
	var parts []string
	for _, id := range ids {
		peers[id] = fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
		parts = append(parts, fmt.Sprintf("%d=%s", id, peers[id]))
	}
	peerFlag := strings.Join(parts, ",")
	procs := map[string]*proc{}
	var names []string
	startProc := func(name string, args []string) {
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lf.Close() })
		p := &proc{log: lf, args: args}
		p.start(t)
		procs[name] = p
		names = append(names, name)
	}
	for _, id := range ids {
		role := "seq"
		if id >= cmdlog.FirstShardID {
			role = "shard"
		}
		startProc(fmt.Sprintf("node-%d", id), append([]string{"logd", "--role", role, "--id", fmt.Sprint(id), "--peers", peerFlag,
			"--data", filepath.Join(dir, fmt.Sprint(id)), "--tls-dir", tlsDir, "--coord", natsURL, "--coord-replicas", "3",
			"--tick", faultsTick, "--suspect-ticks", faultsSuspect}, creds...))
	}
	defer func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.Process != nil {
				p.cmd.Process.Signal(syscall.SIGCONT)
			}
			p.kill()
		}
		if keep := os.Getenv("BROADSIDE_KEEP_LOGS"); keep != "" {
			exec.Command("cp", "-r", dir, keep).Run() // passed or not: the processes' logs
		}
		if t.Failed() {
			for _, n := range names {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				lines := strings.Split(string(b), "\n")
				t.Logf("%s log tail:\n%s", n, strings.Join(lines[max(0, len(lines)-20):], "\n"))
			}
		}
	}()
	logFlags := append([]string{"--log-peers", peerFlag, "--log-tls-dir", tlsDir, "--log-coord", natsURL,
		"--log-nats-user", "broadside", "--log-nats-password-file", pwFile, "--log-nats-ca", caFile}, creds...)
	workers := []string{"w1", "w2", "w3"}
	for _, w := range workers {
		args := []string{"sector", "--nats", natsURL, "--replicas", "3", "--worker", w, "--ticker", "--world-size", "1000", "--islands", "4"}
		if w == "w3" {
			args = append(args, "--standby") // its takeovers start from hot copies
		}
		startProc(w, append(args, logFlags...))
	}

	// Bots: players join, then steer and fire, each command appended to
	// the log and counted when acknowledged.
	_, clientTLS := mustMutualTLS(t, ca)
	type cmdKey struct {
		player uint32
		seq    uint64
	}
	var (
		amu    sync.Mutex
		acked  = map[cmdKey]bool{}
		nAcked atomic.Int64
	)
	stopBots := make(chan struct{})
	var bots sync.WaitGroup
	const players = 12
	for c := range 2 {
		rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: co, ClientTLS: clientTLS, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		for p := uint32(1 + c); p <= players; p += 2 {
			bots.Add(1)
			go func() {
				defer bots.Done()
				rng := rand.New(rand.NewPCG(uint64(p), 9))
				for seq := uint64(1); ; seq++ {
					cmd := broadside.Join()
					switch {
					case seq == 1:
					case seq%7 == 0:
						cmd = broadside.Fire(broadside.Side(1 + rng.IntN(2)))
					case seq%2 == 0:
						cmd = broadside.Throttle(int8(40 + rng.IntN(61)))
					default:
						cmd = broadside.Rudder(int8(rng.IntN(81) - 40))
					}
					rec, err := broadside.CommandRecord(p, seq, cmd)
					if err != nil {
						t.Error(err)
						return
					}
					actx, acancel := context.WithTimeout(ctx, 20*time.Second)
					err = rc.Append(actx, rec)
					acancel()
					if err == nil {
						amu.Lock()
						acked[cmdKey{p, seq}] = true
						amu.Unlock()
						nAcked.Add(1)
					}
					select {
					case <-stopBots:
						return
					case <-time.After(time.Duration(80+rng.IntN(60)) * time.Millisecond):
					}
				}
			}()
		}
	}

	minTick := func() uint64 {
		fmu.Lock()
		defer fmu.Unlock()
		m := uint64(0)
		for s := range uint32(4) {
			if s == 0 || latest[s] < m {
				m = latest[s]
			}
		}
		return m
	}
	// waitTicks waits until every sector published n ticks more.
	waitTicks := func(n uint64, what string) {
		t.Helper()
		target := minTick() + n
		for minTick() < target {
			if ctx.Err() != nil {
				fmu.Lock()
				at := fmt.Sprint(latest)
				fmu.Unlock()
				t.Fatalf("after %s: sectors at ticks %s, waiting for %d", what, at, target)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	owners := func() map[uint32]string {
		t.Helper()
		out := map[uint32]string{}
		for s := range uint32(4) {
			w, _, err := observer.Owner(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			out[s] = w
		}
		return out
	}
	tickerOwner := func() string {
		w, _, _ := observer.Owner(ctx, natsworld.TickerLease)
		return w
	}
	sectorsOf := func(w string) []uint32 {
		var out []uint32
		for s, o := range owners() {
			if o == w {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out
	}
	// A takeover: the sectors of a worker that died or was paused at at,
	// live again under another worker.
	type takeover struct {
		sector                          uint32
		expiry, restore, replay, total  time.Duration
		snapshotTick, liveTick, replays uint64
		epoch                           uint64
		standby                         bool
		at                              time.Time
	}
	var took []takeover
	waitTakeover := func(sectors []uint32, from string, at time.Time, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for _, s := range sectors {
			for {
				var got *natsworld.TakeoverReport
				fmu.Lock()
				for i := range takeovers {
					if r := &takeovers[i]; r.Sector == s && r.Worker != from && r.Acquired > at.UnixNano() {
						got = r
						break
					}
				}
				fmu.Unlock()
				if got != nil {
					tk := takeover{sector: s, expiry: time.Duration(got.Acquired - at.UnixNano()), restore: time.Duration(got.Restored - got.Acquired),
						replay: time.Duration(got.Live - got.Restored), total: time.Duration(got.Live - at.UnixNano()),
						snapshotTick: got.SnapshotTick, liveTick: got.LiveTick, replays: got.Replayed,
						epoch: got.Epoch, standby: got.Standby, at: at}
					took = append(took, tk)
					t.Logf("%s: sector %d live on %s after %v (lease expiry %v, restore %v, replay %v: ticks %d to %d)", what, s, got.Worker,
						tk.total.Round(time.Millisecond), tk.expiry.Round(time.Millisecond), tk.restore.Round(time.Millisecond),
						tk.replay.Round(time.Millisecond), tk.snapshotTick, tk.liveTick)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: sector %d not taken over within 20 s", what, s)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}

	var roles []string
	// settle waits until every sector has an owner, the same for 300 ms
	// (the assignment rebalanced after a worker joined).
	settle := func(what string) map[uint32]string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		prev := owners()
		for {
			time.Sleep(300 * time.Millisecond)
			cur := owners()
			full := true
			for s := range uint32(4) {
				full = full && cur[s] != "" && cur[s] == prev[s]
			}
			if full {
				return cur
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s: the sectors' owners never settled: %v", what, cur)
			}
			prev = cur
		}
	}
	waitTicks(90, "start")
	settle("start")
	quietFrom := time.Now()
	time.Sleep(3 * time.Second) // a quiet period, to compare the ticks during takeovers with

	// 1. SIGKILL the worker owning sector 0; restart it (it rejoins and
	// the assignment hands its sectors back).
	victim := settle("start")[0]
	vs := sectorsOf(victim)
	victimTicker := tickerOwner()
	killedAt := time.Now()
	procs[victim].kill()
	roles = append(roles, "worker")
	t.Logf("SIGKILL worker %s (sectors %v; the Ticker's lease: %s) at %d acked", victim, vs, victimTicker, nAcked.Load())
	waitTakeover(vs, victim, killedAt, "worker SIGKILL")
	time.Sleep(500 * time.Millisecond)
	restartedAt := time.Now()
	procs[victim].start(t)
	waitTicks(60, "worker restart")
	settle("worker restart")

	// 2. SIGSTOP the owner of another sector past its leases, then SIGCONT.
	var paused string
	for _, s := range []uint32{1, 2, 3, 0} {
		if w := owners()[s]; w != "" && w != victim {
			paused = w
			break
		}
	}
	if paused == "" {
		paused = owners()[1]
	}
	ps := sectorsOf(paused)
	pausedEpochs := map[uint32]uint64{}
	for _, sct := range ps {
		if w, e, err := observer.Owner(ctx, sct); err == nil && w == paused {
			pausedEpochs[sct] = e
		}
	}
	pausedTicker := tickerOwner()
	pausedAt := time.Now()
	procs[paused].cmd.Process.Signal(syscall.SIGSTOP)
	t.Logf("SIGSTOP worker %s (sectors %v; the Ticker's lease: %s) at %d acked", paused, ps, pausedTicker, nAcked.Load())
	waitTakeover(ps, paused, pausedAt, "worker SIGSTOP")
	time.Sleep(time.Until(pausedAt.Add(1500 * time.Millisecond)))
	wokeAt := time.Now()
	procs[paused].cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("SIGCONT worker %s after %v", paused, wokeAt.Sub(pausedAt).Round(time.Millisecond))
	waitTicks(60, "worker SIGCONT")
	time.Sleep(time.Second)

	// 3. SIGKILL the sequencing leader; restart it.
	v, _, err := co.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := fmt.Sprintf("node-%d", v.Leader)
	procs[leader].kill()
	roles = append(roles, "leader")
	t.Logf("SIGKILL the sequencing leader (node %d) at %d acked", v.Leader, nAcked.Load())
	time.Sleep(700 * time.Millisecond)
	procs[leader].start(t)
	waitTicks(60, "leader kill")

	// 4. Stop a NATS node; restart it.
	nc.StopNode(2)
	roles = append(roles, "nats node")
	t.Logf("stopped NATS node 3 at %d acked", nAcked.Load())
	time.Sleep(2 * time.Second)
	if err := nc.RestartNode(2); err != nil {
		t.Fatal(err)
	}
	waitTicks(60, "NATS node restart")

	close(stopBots)
	bots.Wait()
	waitTicks(30, "the bots' end")
	// Stop the workers cleanly (they release their leases) and read the log.
	for _, w := range workers {
		if p := procs[w]; p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range workers {
		done := make(chan struct{})
		go func() { procs[w].cmd.Wait(); close(done) }()
		select {
		case <-done:
			procs[w].cmd = nil
		case <-time.After(10 * time.Second):
			t.Errorf("worker %s did not stop on SIGTERM", w)
			procs[w].kill()
		}
	}

	rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, Coordinator: co, ClientTLS: clientTLS, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tail, err := rc.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []msg.Entry
	sub := rc.Subscribe(1)
	inLog := map[cmdKey]int{}
	claimAfterPause := map[uint32]uint64{}
	migrations := 0
	for sub.Position() <= tail {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("read %d of %d: %v", sub.Position(), tail, err)
		}
		entries = append(entries, e)
		env, err := wire.DecodeEnvelope(e.Record.Data)
		switch {
		case err != nil:
		case env.Kind == wire.EnvelopePlayerCommand:
			inLog[cmdKey{env.Player, env.ClientSeq}]++
		case env.Kind == wire.EnvelopeMigration:
			migrations++
		case env.Kind == wire.EnvelopeControl && bytes.Equal(e.Record.Data, replay.LeaseClaimRecord(env.Shard, env.Epoch)):
			// The first claim of a paused sector after the pause: the
			// paused worker's runner steps nothing past it.
			if pe, ok := pausedEpochs[env.Shard]; ok && env.Epoch > pe && claimAfterPause[env.Shard] == 0 {
				claimAfterPause[env.Shard] = e.Pos
			}
		}
	}
	lost, duplicated := 0, 0
	for k := range acked {
		if inLog[k] == 0 {
			lost++
		}
	}
	for _, n := range inLog {
		if n > 1 {
			duplicated += n - 1
		}
	}

	// The uninterrupted re-simulation of the log, sector by sector.
	game, err := broadside.NewGame(broadside.Config{Seed: 1, Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 2, Islands: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]uint64]uint64{}
	var stale, claims uint64
	lastTick := uint64(0)
	for s := range uint32(game.Shards) {
		sim, err := game.NewSim(s)
		if err != nil {
			t.Fatal(err)
		}
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: s, Sim: sim, Source: replay.NewSliceSource(entries, 1),
			Logger: quietLogger(), Observer: func(info replay.TickInfo) {
				want[[2]uint64{uint64(s), info.Tick}] = info.Hash
				lastTick = max(lastTick, info.Tick)
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); err != nil {
			t.Fatalf("re-simulate sector %d: %v", s, err)
		}
		st := r.Stats()
		stale, claims = stale+st.Stale, claims+st.Claims
	}
	fmu.Lock()
	defer fmu.Unlock()
	checked, mismatched, zombie := 0, 0, 0
	seen := map[[2]uint64]bool{}
	for _, cf := range frames {
		f := cf.f
		key := [2]uint64{uint64(f.Sector), f.Tick}
		if e, ok := pausedEpochs[f.Sector]; ok && f.Epoch == e && claimAfterPause[f.Sector] != 0 && f.Pos > claimAfterPause[f.Sector] {
			zombie++ // a tick the paused worker stepped past its successor's claim
		}
		h, ok := want[key]
		if !ok {
			continue // past the log read
		}
		checked++
		seen[key] = true
		if h != f.Hash {
			mismatched++
			if mismatched < 5 {
				t.Errorf("sector %d tick %d (epoch %d): published hash %#x, re-simulation %#x", f.Sector, f.Tick, f.Epoch, f.Hash, h)
			}
		}
	}
	missing := 0
	for key := range want {
		if !seen[key] {
			missing++
		}
	}
	lat := hdrhistogram.New(1, 60_000_000, 3)
	for _, cf := range frames {
		_ = lat.RecordValue(max(1, cf.at.Sub(time.Unix(0, cf.f.Published)).Microseconds()))
	}
	// The gap players see: ticks of a taken-over sector that no frame
	// ever delivered, between the last before the failure and the first
	// of the new owner.
	var gaps []string
	for _, tk := range took {
		var before, first uint64
		for _, cf := range frames {
			switch {
			case cf.f.Sector != tk.sector:
			case cf.at.Before(tk.at):
				before = max(before, cf.f.Tick)
			case cf.f.Epoch == tk.epoch && (first == 0 || cf.f.Tick < first):
				first = cf.f.Tick
			}
		}
		mode := "restore"
		if tk.standby {
			mode = "standby"
		}
		gaps = append(gaps, fmt.Sprintf("%s %d", mode, max(0, int64(first)-int64(before)-1)))
	}
	hist := hdrhistogram.New(1, 60_000_000, 3)
	for _, tk := range took {
		_ = hist.RecordValue(tk.total.Microseconds())
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	split := func(pick func(takeover) time.Duration) string {
		h := hdrhistogram.New(1, 60_000_000, 3)
		for _, tk := range took {
			_ = h.RecordValue(pick(tk).Microseconds())
		}
		return fmt.Sprintf("%.0f/%.0f", ms(h.ValueAtQuantile(50)), ms(h.Max()))
	}
	hashes := "hashes identical"
	if mismatched > 0 {
		hashes = fmt.Sprintf("%d hashes differ", mismatched)
	}
	line := fmt.Sprintf("cluster: %d kills (%s) and 1 worker SIGSTOPped past its leases then SIGCONTed (%d frames past its successor's claim, %d stale outputs in the log ignored), %d acked, %d lost, %d duplicated, takeover p50/max %.0f/%.0f ms, %s",
		len(roles), strings.Join(roles, ", "), zombie, stale, len(acked), lost, duplicated, ms(hist.ValueAtQuantile(50)), ms(hist.Max()), hashes)
	detail := fmt.Sprintf("cluster: %d takeovers: lease expiry p50/max %s ms, restore %s ms, replay %s ms; frame latency (published to received) p50/p99/max %.2f/%.2f/%.2f ms; %d frames checked against the re-simulation of %d log positions (%d ticks x %d sectors, %d sector-ticks never received), %d lease claims and %d migrations in the log",
		len(took), split(func(tk takeover) time.Duration { return tk.expiry }), split(func(tk takeover) time.Duration { return tk.restore }),
		split(func(tk takeover) time.Duration { return tk.replay }),
		ms(lat.ValueAtQuantile(50)), ms(lat.ValueAtQuantile(99)), ms(lat.Max()), checked, tail, lastTick, game.Shards, missing, claims, migrations)
	detail += fmt.Sprintf("; ticks missing from the frames per takeover: %s", strings.Join(gaps, ", "))
	// The other sectors' ticks during a takeover: the interval between
	// the first publications of consecutive ticks of a sector not taken
	// over, from a SIGKILL or SIGSTOP until the worker is back, against
	// the quiet period before the first kill.
	firstPub := map[[2]uint64]int64{}
	for _, cf := range frames {
		k := [2]uint64{uint64(cf.f.Sector), cf.f.Tick}
		if p, ok := firstPub[k]; !ok || cf.f.Published < p {
			firstPub[k] = cf.f.Published
		}
	}
	quiet, during := hdrhistogram.New(1, 60_000_000, 3), hdrhistogram.New(1, 60_000_000, 3)
	// Each window ends when the failed worker comes back (its rejoining
	// moves sectors again).
	events := []struct {
		at, end time.Time
		sectors []uint32
	}{{killedAt, restartedAt, vs}, {pausedAt, wokeAt, ps}}
	for k, p := range firstPub {
		prev, ok := firstPub[[2]uint64{k[0], k[1] - 1}]
		if !ok || p <= prev {
			continue
		}
		at, iv := time.Unix(0, p), (p-prev)/1000
		if at.After(quietFrom) && at.Before(killedAt) {
			_ = quiet.RecordValue(iv)
		}
		for _, ev := range events {
			if !slices.Contains(ev.sectors, uint32(k[0])) && !at.Before(ev.at) && at.Before(ev.end) {
				_ = during.RecordValue(iv)
			}
		}
	}
	detail += fmt.Sprintf("; the other sectors' tick interval p50/p99 from each failure until the worker is back %.1f/%.1f ms (%d ticks), quiet %.1f/%.1f ms (%d ticks; the Ticker's lease was on %s at the SIGKILL, %s at the SIGSTOP)",
		ms(during.ValueAtQuantile(50)), ms(during.ValueAtQuantile(99)), during.TotalCount(),
		ms(quiet.ValueAtQuantile(50)), ms(quiet.ValueAtQuantile(99)), quiet.TotalCount(), victimTicker, pausedTicker)
	fmt.Println(line)
	fmt.Println(detail)
	t.Log(line)
	t.Log(detail)
	if lost > 0 || duplicated > 0 || mismatched > 0 || zombie > 0 || checked == 0 || len(took) == 0 || migrations == 0 {
		t.Fatal(line)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
