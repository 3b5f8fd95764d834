package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
)

// crashRig runs 'broadside serve' as a real process on one data directory,
// again and again, and remembers what it published.
type crashRig struct {
	t                  *testing.T
	dir, addr, admin   string
	args               []string
	secret             []byte
	clientTLS          *tls.Config
	mu                 sync.Mutex
	hashes             map[[2]uint64]uint64 // (tick, shard) -> hash, as published
	hashConflicts      []string
	acked              map[[2]uint64]time.Time // (player, seq) acknowledged durable, when
	lastMissing        [][2]uint64             // acknowledged, not found by the last checkLog
	ackedN             int
	incarnation        int
	restartToReadyMs   []float64
	publishedPerIncarn []int
}

func newCrashRig(t *testing.T) *crashRig {
	dir := t.TempDir()
	port := freeUDPPort(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := l.Addr().String()
	l.Close()
	r := &crashRig{t: t, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), admin: admin,
		hashes: map[[2]uint64]uint64{}, acked: map[[2]uint64]time.Time{}}
	r.args = []string{"serve", "--dev", "--listen", r.addr, "--admin-addr", admin,
		"--tls-dir", filepath.Join(dir, "tls"), "--secret-file", filepath.Join(dir, "server.secret"),
		"--data", filepath.Join(dir, "data"), "--record", filepath.Join(dir, "match.bsr"),
		"--sectors", "2", "--world-size", "2000", "--islands", "4"}
	if hold := os.Getenv("BROADSIDE_CRASH_ACK_HOLD"); hold != "" {
		// Acknowledgements inside state datagrams (serve --ack-hold)
		// must keep the promise across the kills too.
		r.args = append(r.args, "--ack-hold", hold, "--acks-in-state")
	}
	return r
}

// start starts an incarnation of the server (with extra flags) and waits
// until it listens (or, with a kill point among the flags, has died).
func (r *crashRig) start(extra ...string) (*exec.Cmd, *os.File, <-chan struct{}) {
	r.t.Helper()
	r.incarnation++
	f, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("serve-%d.log", r.incarnation)))
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append(append([]string(nil), r.args...), extra...)...)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	dead := make(chan struct{})
	go func() { cmd.Wait(); close(dead) }()
	r.t.Cleanup(func() {
		cmd.Process.Kill()
		<-dead
		if r.t.Failed() {
			b, _ := os.ReadFile(f.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			r.t.Logf("the last lines of %s:\n%s", filepath.Base(f.Name()), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(f.Name())
		if bytes.Contains(b, []byte("listening on")) {
			break
		}
		select {
		case <-dead:
			if len(extra) > 0 {
				return cmd, f, dead // a kill point before it listened
			}
			r.t.Fatalf("incarnation %d died as it started:\n%s", r.incarnation, b)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("incarnation %d did not start:\n%s", r.incarnation, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.secret == nil {
		if r.secret, err = server.LoadOrCreateSecret(filepath.Join(r.dir, "server.secret")); err != nil {
			r.t.Fatal(err)
		}
		pem, err := os.ReadFile(filepath.Join(r.dir, "tls", "ca.pem"))
		if err != nil {
			r.t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		r.clientTLS = &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{wire.ALPN}}
	}
	return cmd, f, dead
}

// ready reports whether the server answers /readyz with 200, and why not.
func (r *crashRig) ready() (bool, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + r.admin + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
}

// waitReady waits until the incarnation is ready and returns how long it
// took from its start.
func (r *crashRig) waitReady(since time.Time) time.Duration {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, why := r.ready()
		if ok {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("incarnation %d not ready after 60 s: %s", r.incarnation, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReadyOrExit waits until the incarnation is ready (true, and how long
// it took from its start) or has exited (false).
func (r *crashRig) waitReadyOrExit(since time.Time, exited <-chan struct{}) (time.Duration, bool) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ok, _ := r.ready(); ok {
			return time.Since(since), true
		}
		select {
		case <-exited:
			return 0, false
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_, why := r.ready()
			r.t.Fatalf("incarnation %d not ready after 60 s: %s", r.incarnation, why)
		}
	}
}

// pollHashes fetches the hashes published since from and records them; a
// hash that differs from one published before (by this or an earlier
// incarnation) is a conflict. It returns the next tick to ask for.
func (r *crashRig) pollHashes(from uint64) uint64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/world/hashes?from=%d", r.admin, from))
	if err != nil {
		return from
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return from
	}
	next := from
	sc := bufio.NewScanner(resp.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	for sc.Scan() {
		var tick, shard, pos uint64
		var hash uint64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %x %d", &tick, &shard, &hash, &pos); err != nil {
			continue
		}
		k := [2]uint64{tick, shard}
		if prev, ok := r.hashes[k]; ok && prev != hash {
			r.hashConflicts = append(r.hashConflicts, fmt.Sprintf("tick %d sector %d: %016x, then %016x", tick, shard, prev, hash))
		}
		r.hashes[k] = hash
		next = max(next, tick)
	}
	return next
}

// play runs one fleet of bots for the whole test — they reconnect to
// every new incarnation, resume their sessions and resend what was not
// acknowledged — and polls the published hashes, until ctx ends.
func (r *crashRig) play(ctx context.Context, n int) (done func() bots.Report) {
	var wg sync.WaitGroup
	var rep bots.Report
	wg.Add(2)
	go func() {
		defer wg.Done()
		rep, _ = bots.Run(ctx, bots.Config{Server: r.addr, TLS: r.clientTLS, Secret: r.secret,
			N: n, Rate: 10, Duration: 5 * time.Minute, Seed: 1, ReconnectAttempts: 60,
			OnAck: func(player uint32, seq uint64, status wire.AckStatus) {
				if status != wire.AckDurable {
					r.t.Errorf("player %d seq %d acknowledged %v, not durable", player, seq, status)
				}
				r.mu.Lock()
				r.acked[[2]uint64{uint64(player), seq}] = time.Now()
				r.ackedN++
				r.mu.Unlock()
			}})
	}()
	go func() {
		defer wg.Done()
		from := uint64(1)
		for ctx.Err() == nil {
			from = r.pollHashes(from)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() bots.Report { wg.Wait(); return rep }
}

// TestCrashRealProcesses SIGKILLs a game server at random moments while
// bots play — once in the middle of a snapshot write, once while its
// sectors are recovering — and restarts it on its data directory each
// time. At the end it checks that every command acknowledged durable is in
// the log exactly once, that a re-simulation of the whole log reproduces
// every tick hash the live server published, before and after each crash,
// and that the recording, continued in a new segment after every crash,
// verifies.
func TestCrashRealProcesses(t *testing.T) {
	r := newCrashRig(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("BROADSIDE_CRASH_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}
	t.Logf("seed %d (the kills' timing; BROADSIDE_CRASH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	const kills = 5
	// killed counts the kills no restart has resumed from yet; resumed the
	// kills a later incarnation resumed the match from.
	var killed, resumed, duringSnapshot, duringRecovery int
	playCtx, stopPlay := context.WithCancel(context.Background())
	defer stopPlay()
	var done func() bots.Report
	for k := 0; k < kills; k++ {
		started := time.Now()
		var cmd *exec.Cmd
		var exited <-chan struct{}
		switch k {
		case 2:
			// Dies by itself as it is about to store a snapshot.
			cmd, _, exited = r.start("--test-kill-at-snapshot", fmt.Sprint(100+rng.IntN(100)))
		case 3:
			// Dies by itself while it restores a sector from its snapshots
			// (the recovery of the crash before).
			cmd, _, exited = r.start("--test-kill-at-restore", fmt.Sprint(1+rng.IntN(3)))
		default:
			cmd, _, exited = r.start()
		}
		if k == 3 {
			<-exited
			ok, _ := r.ready()
			if cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL && !ok {
				duringRecovery++
				t.Logf("kill %d: the server SIGKILLed itself in the middle of a recovery", k+1)
			}
			killed++
			continue
		}
		took, ok := r.waitReadyOrExit(started, exited)
		if !ok {
			if k == 2 {
				t.Fatalf("incarnation %d died before it was ready: its snapshot kill point came too early", r.incarnation)
			}
			t.Fatalf("incarnation %d exited before it was ready", r.incarnation)
		}
		if k > 0 {
			resumed += killed
			killed = 0
			r.restartToReadyMs = append(r.restartToReadyMs, float64(took.Microseconds())/1000)
		}
		if k == 0 {
			done = r.play(playCtx, 6)
		}
		if k == 2 {
			select {
			case <-exited:
				duringSnapshot++
				killed++
				t.Logf("kill %d: the server SIGKILLed itself in the middle of a snapshot write (%v)", k+1, cmd.ProcessState)
			case <-time.After(30 * time.Second):
				t.Fatal("the snapshot-write kill point was never reached")
			}
		} else {
			time.Sleep(time.Duration(800+rng.IntN(1500)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			killed++
			t.Logf("kill %d: SIGKILL at a random moment", k+1)
		}
	}
	// The last incarnation resumes, plays and stops cleanly.
	started := time.Now()
	cmd, out, exited := r.start()
	r.restartToReadyMs = append(r.restartToReadyMs, float64(r.waitReady(started).Microseconds())/1000)
	resumed += killed
	time.Sleep(2 * time.Second)
	stopPlay()
	fleet := done()
	r.pollHashes(1)
	cmd.Process.Signal(os.Interrupt)
	<-exited
	if err := cmd.ProcessState; !err.Success() {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("graceful stop: %v\n%s", err, b)
	}

	lost, dup, entries := r.checkLog()
	final := lastTick(entries)
	mismatched, checked := r.checkHashes(entries, final)
	segs := r.checkRecording(final)
	t.Logf("restart to ready: %v ms; %d hashes published and checked; recording in %d segments; bots: %d sent, %d acked, %d reconnections, %d commands resent",
		r.restartToReadyMs, checked, segs, fleet.Sent, fleet.Acked, fleet.Reconnects, fleet.Resent)
	identical := "hashes identical"
	if mismatched > 0 || len(r.hashConflicts) > 0 {
		identical = fmt.Sprintf("%d hashes differ, %d conflicts", mismatched, len(r.hashConflicts))
	}
	line := fmt.Sprintf("crash: %d kills, %d acked, %d lost, %d duplicated, resumed %d/%d, hashes identical", kills, len(r.acked), lost, dup, resumed, kills)
	if identical != "hashes identical" {
		line = strings.Replace(line, "hashes identical", identical, 1)
	}
	fmt.Println(line)
	t.Log(line)
	switch {
	case lost > 0 || dup > 0:
		t.Fatalf("%d acknowledged commands lost, %d duplicated", lost, dup)
	case mismatched > 0 || len(r.hashConflicts) > 0:
		t.Fatalf("published hashes differ from the re-simulation: %d, conflicts %v", mismatched, r.hashConflicts)
	case resumed != kills:
		t.Fatalf("resumed %d of %d", resumed, kills)
	case duringSnapshot != 1 || duringRecovery != 1:
		t.Fatalf("kills during a snapshot write: %d, during recovery: %d (want 1 and 1)", duringSnapshot, duringRecovery)
	case checked == 0 || len(r.acked) == 0:
		t.Fatal("nothing was checked")
	case fleet.Reconnects == 0:
		t.Fatal("no bot reconnected: resumption was not exercised")
	}
}

// checkLog reads the stopped server's log and counts the acknowledged
// commands it lacks or holds twice.
func (r *crashRig) checkLog() (lost, dup int, entries []msg.Entry) {
	r.t.Helper()
	sl, err := world.OpenStored(filepath.Join(r.dir, "data"), quietLogger())
	if err != nil {
		r.t.Fatal(err)
	}
	defer sl.Close()
	for {
		e, err := sl.Next(context.Background())
		if err != nil {
			break
		}
		entries = append(entries, e)
	}
	seen := map[[2]uint64]int{}
	for _, e := range entries {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err == nil && env.Kind == wire.EnvelopePlayerCommand {
			seen[[2]uint64{uint64(env.Player), env.ClientSeq}]++
		}
	}
	r.lastMissing = r.lastMissing[:0]
	for k := range r.acked {
		switch n := seen[k]; {
		case n == 0:
			lost++
			r.lastMissing = append(r.lastMissing, k)
		case n > 1:
			dup++
		}
	}
	return lost, dup, entries
}

// missing lists the acknowledged (player, seq) pairs the last checkLog
// did not find, in order, at most 20 of them, each with when it was
// acknowledged relative to since.
func (r *crashRig) missing(since time.Time) string {
	slices.SortFunc(r.lastMissing, func(a, b [2]uint64) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var b strings.Builder
	for i, k := range r.lastMissing {
		if i == 20 {
			fmt.Fprintf(&b, " and %d more", len(r.lastMissing)-i)
			break
		}
		fmt.Fprintf(&b, " %d/%d@%+.2fs", k[0], k[1], r.acked[k].Sub(since).Seconds())
	}
	return strings.TrimSpace(b.String())
}

func lastTick(entries []msg.Entry) uint64 {
	var last uint64
	for _, e := range entries {
		if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeTick {
			last = max(last, env.Tick)
		}
	}
	return last
}

// checkHashes re-simulates the whole log and compares every published
// hash with it.
func (r *crashRig) checkHashes(entries []msg.Entry, final uint64) (mismatched, checked int) {
	r.t.Helper()
	game, err := broadside.NewGame(broadside.Config{Seed: 1, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 4}, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	hashes, _, err := world.Resimulate(context.Background(), game, world.DefaultID, entries, final, slog.New(slog.DiscardHandler))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, h := range r.hashes {
		tick, shard := k[0], k[1]
		if tick > final || int(shard) >= len(hashes) {
			mismatched++
			continue
		}
		got, ok := hashes[shard].Get(tick)
		if !ok || got.Hash != h {
			mismatched++
			continue
		}
		checked++
	}
	return mismatched, checked
}

// checkRecording verifies every segment of the recording and that they
// cover the match without a gap.
func (r *crashRig) checkRecording(final uint64) int {
	r.t.Helper()
	segs := world.Segments(filepath.Join(r.dir, "match.bsr"))
	if len(segs) == 0 {
		r.t.Fatal("no recording")
	}
	next := uint64(1)
	for _, p := range segs {
		rd, err := bsr.Open(p)
		if err != nil {
			r.t.Fatalf("%s: %v", p, err)
		}
		game, _, err := broadside.GameOf(rd.Header().GameConfig)
		if err != nil {
			r.t.Fatal(err)
		}
		if rd.LastTick() >= rd.FirstTick() {
			res, err := bsr.Verify(context.Background(), rd, game.NewSim, nil)
			if err != nil || !res.OK {
				r.t.Fatalf("segment %s (ticks %d..%d) does not verify: %+v %v", p, rd.FirstTick(), rd.LastTick(), res, err)
			}
			if rd.FirstTick() > next {
				r.t.Fatalf("segment %s starts at tick %d: ticks %d..%d are in no segment", p, rd.FirstTick(), next, rd.FirstTick()-1)
			}
			next = max(next, rd.LastTick()+1)
		}
		rd.Close()
	}
	if next <= final {
		r.t.Fatalf("the recording's segments end at tick %d, the match at %d", next-1, final)
	}
	return len(segs)
}
