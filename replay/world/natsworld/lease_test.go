package natsworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTTL = 300 * time.Millisecond

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startNATS starts an embedded NATS with JetStream and returns a JetStream
// context factory: every call is a new connection (a worker of its own).
func startNATS(t *testing.T) func() jetstream.JetStream {
	t.Helper()
	e, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return func() jetstream.JetStream {
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openLeases(t *testing.T, js jetstream.JetStream, worker string) *Leases {
	t.Helper()
	l, err := OpenLeases(ctxT(t), js, LeasesConfig{World: 1, Worker: worker, TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitFor polls cond until it holds (the test fails after 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClaimRenewRelease(t *testing.T) {
	js := startNATS(t)
	a, b := openLeases(t, js(), "a"), openLeases(t, js(), "b")
	ctx := ctxT(t)
	if a.TTL() != testTTL {
		t.Fatalf("TTL %v, want the bucket's %v", a.TTL(), testTTL)
	}
	la, err := a.Claim(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, 3); !errors.Is(err, ErrHeld) {
		t.Fatalf("second claim: %v, want ErrHeld", err)
	}
	if _, err := a.Claim(ctx, 3); !errors.Is(err, ErrHeld) {
		t.Fatalf("claim of a lease held by the same worker: %v, want ErrHeld", err)
	}
	epoch := la.Epoch
	for range 3 {
		rev := la.Revision
		if err := a.Renew(ctx, &la); err != nil {
			t.Fatal(err)
		}
		if la.Revision <= rev || la.Epoch != epoch {
			t.Fatalf("after renewal: revision %d (was %d), epoch %d (was %d)", la.Revision, rev, la.Epoch, epoch)
		}
	}
	if w, e, err := b.Owner(ctx, 3); err != nil || w != "a" || e != epoch {
		t.Fatalf("owner: %q epoch %d, %v; want a, %d", w, e, err, epoch)
	}
	// A renewal that expects a stale revision is refused.
	stale := la
	stale.Revision--
	if err := a.Renew(ctx, &stale); !errors.Is(err, ErrLost) {
		t.Fatalf("stale renewal: %v, want ErrLost", err)
	}
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	if w, _, err := b.Owner(ctx, 3); err != nil || w != "" {
		t.Fatalf("owner after release: %q, %v", w, err)
	}
	lb, err := b.Claim(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Epoch <= epoch {
		t.Fatalf("epoch of the next claim %d, want > %d", lb.Epoch, epoch)
	}
	if err := a.Renew(ctx, &la); !errors.Is(err, ErrLost) {
		t.Fatalf("renewal of a released lease: %v, want ErrLost", err)
	}
}

// A paused owner (SIGSTOP, a long pause) does not renew: its lease expires,
// another worker claims it with a higher epoch, and the owner's renewal
// when it wakes up is refused.
func TestPausedOwnerLosesLease(t *testing.T) {
	js := startNATS(t)
	a, b := openLeases(t, js(), "a"), openLeases(t, js(), "b")
	ctx := ctxT(t)
	la, err := a.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("claim of a live lease: %v", err)
	}
	var lb Lease
	waitFor(t, "the paused owner's lease to expire and b to claim it", func() bool {
		lb, err = b.Claim(ctx, 0)
		if err != nil && !errors.Is(err, ErrHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	if lb.Epoch <= la.Epoch {
		t.Fatalf("new epoch %d, want > %d", lb.Epoch, la.Epoch)
	}
	if err := a.Renew(ctx, &la); !errors.Is(err, ErrLost) {
		t.Fatalf("the paused owner's renewal: %v, want ErrLost", err)
	}
	if w, e, err := a.Owner(ctx, 0); err != nil || w != "b" || e != lb.Epoch {
		t.Fatalf("owner %q epoch %d, %v; want b, %d", w, e, err, lb.Epoch)
	}
	// The new owner's lease is untouched by the failed renewal.
	if err := b.Renew(ctx, &lb); err != nil {
		t.Fatal(err)
	}
}

// A lease that expired with nobody claiming it cannot be renewed either:
// the owner must claim it anew, with a new epoch.
func TestExpiredLeaseCannotBeRenewed(t *testing.T) {
	js := startNATS(t)
	a := openLeases(t, js(), "a")
	ctx := ctxT(t)
	la, err := a.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease to expire", func() bool {
		w, _, err := a.Owner(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return w == ""
	})
	if err := a.Renew(ctx, &la); !errors.Is(err, ErrLost) {
		t.Fatalf("renewal of an expired lease: %v, want ErrLost", err)
	}
	again, err := a.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if again.Epoch <= la.Epoch {
		t.Fatalf("epoch %d, want > %d", again.Epoch, la.Epoch)
	}
}

func TestOpenLeasesRefusesBucketWithoutTTL(t *testing.T) {
	js := startNATS(t)()
	ctx := ctxT(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "no-ttl"}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLeases(ctx, js, LeasesConfig{Bucket: "no-ttl", World: 1, Worker: "a"}); err == nil {
		t.Fatal("a bucket without TTL was accepted")
	}
	for _, bad := range []string{"", "a.b", "a b", "*"} {
		if _, err := OpenLeases(ctx, js, LeasesConfig{World: 1, Worker: bad}); err == nil {
			t.Fatalf("worker id %q accepted", bad)
		}
	}
}

func TestAssign(t *testing.T) {
	if got := Assign(1, 0, nil); got != "" {
		t.Fatalf("no workers: %q", got)
	}
	workers := []string{"w1", "w2", "w3"}
	count := map[string]int{}
	for s := range uint32(64) {
		a := Assign(1, s, workers)
		if !slices.Contains(workers, a) {
			t.Fatalf("sector %d assigned to %q", s, a)
		}
		if b := Assign(1, s, []string{"w3", "w1", "w2"}); b != a {
			t.Fatalf("sector %d: %q or %q depending on order", s, a, b)
		}
		count[a]++
		// A worker joining takes sectors only for itself; one leaving
		// gives away only its own.
		joined := Assign(1, s, append(slices.Clone(workers), "w4"))
		if joined != a && joined != "w4" {
			t.Fatalf("sector %d moved from %s to %s when w4 joined", s, a, joined)
		}
		left := Assign(1, s, []string{"w1", "w3"})
		if a != "w2" && left != a {
			t.Fatalf("sector %d moved from %s to %s when w2 left", s, a, left)
		}
	}
	for _, w := range workers {
		if count[w] < 8 {
			t.Fatalf("unbalanced assignment of 64 sectors: %v", count)
		}
	}
}

// sectorLog records the sectors a keeper starts and stops.
type sectorLog struct {
	mu      sync.Mutex
	running map[uint32]uint64 // sector -> epoch
	lost    []error
	// validAtLose is, per lost, whether the keeper's Valid held for the
	// lease while the sector was being stopped.
	validAtLose []bool
	k           *Keeper
}

func (s *sectorLog) keeper(t *testing.T, l *Leases, sectors int) *Keeper {
	s.running = map[uint32]uint64{}
	var k *Keeper
	k, err := NewKeeper(KeeperConfig{Leases: l, Sectors: sectors, Logger: quiet(),
		OnAcquire: func(le Lease) {
			s.mu.Lock()
			s.running[le.Sector] = le.Epoch
			s.mu.Unlock()
		},
		OnLose: func(le Lease, err error) {
			valid := k.Valid(le.Sector, le.Epoch)
			s.mu.Lock()
			delete(s.running, le.Sector)
			s.lost = append(s.lost, err)
			s.validAtLose = append(s.validAtLose, valid)
			s.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// checkValidAtLose: a sector whose lease was lost is stopped after Valid
// turned false; one handed over (err nil) or stopped cleanly (ctx's
// error) while its lease is still valid, freshly renewed, so that its
// last writes go out (on a machine that stalls past three quarters of a
// TTL in between, Valid has run out: at least one of them must have
// been valid).
func (s *sectorLog) checkValidAtLose(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	stops, valid := 0, 0
	for i, err := range s.lost {
		if errors.Is(err, ErrLost) {
			if s.validAtLose[i] {
				t.Fatalf("sector stopped (%v) with its lease still valid", err)
			}
			continue
		}
		stops++
		if s.validAtLose[i] {
			valid++
		}
	}
	if stops > 0 && valid == 0 {
		t.Fatalf("none of %d sectors handed over or stopped had a valid lease while stopping", stops)
	}
}

func (s *sectorLog) sectors() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint32
	for sec := range s.running {
		out = append(out, sec)
	}
	slices.Sort(out)
	return out
}

// Keepers spread the sectors over the live workers, exactly one owner
// each; a worker joining takes its share; a worker that dies (stops
// renewing, no clean release) loses its sectors to the others once its
// leases expire.
func TestKeepersRebalanceAndTakeOver(t *testing.T) {
	js := startNATS(t)
	const sectors = 8
	logs := make([]*sectorLog, 3)
	keepers := make([]*Keeper, 3)
	for i := range keepers {
		logs[i] = &sectorLog{}
		keepers[i] = logs[i].keeper(t, openLeases(t, js(), fmt.Sprintf("w%d", i)), sectors)
	}
	ctx := ctxT(t)
	ownedOnce := func(live []int) bool {
		seen := map[uint32]int{}
		for _, i := range live {
			for _, s := range logs[i].sectors() {
				seen[s]++
			}
		}
		if len(seen) != sectors {
			return false
		}
		for _, n := range seen {
			if n != 1 {
				t.Fatalf("a sector run by %d workers at once: %v", n, seen)
			}
		}
		return true
	}
	// Rounds run one worker at a time here, so "at once" is exact.
	round := func(live ...int) {
		for _, i := range live {
			keepers[i].Round(ctx)
		}
	}
	round(0)
	if got := logs[0].sectors(); len(got) != sectors {
		t.Fatalf("the only worker runs %v", got)
	}
	waitFor(t, "w1 to take its share", func() bool {
		round(0, 1)
		workers := []string{"w0", "w1"}
		for s := range uint32(sectors) {
			i := 0
			if Assign(1, s, workers) == "w1" {
				i = 1
			}
			if !slices.Contains(logs[i].sectors(), s) {
				return false
			}
		}
		return ownedOnce([]int{0, 1})
	})
	waitFor(t, "three workers to share the sectors", func() bool {
		round(0, 1, 2)
		return ownedOnce([]int{0, 1, 2}) && len(logs[2].sectors()) > 0
	})
	// w2 dies: it neither renews nor releases.
	dead := logs[2].sectors()
	waitFor(t, "w0 and w1 to take w2's sectors", func() bool {
		round(0, 1)
		return ownedOnce([]int{0, 1})
	})
	// w2 wakes up: its first round finds its leases gone and stops them.
	keepers[2].Round(ctx)
	logs[2].mu.Lock()
	stillRunning := len(logs[2].running)
	lost := slices.Clone(logs[2].lost)
	logs[2].mu.Unlock()
	if stillRunning > 0 {
		// Its round may have claimed back sectors assigned to it (w2 is
		// registered again): those are new leases with new epochs.
		for s, e := range logs[2].running {
			if o, oe, _ := keepers[0].cfg.Leases.Owner(ctx, s); o != "w2" || oe != e {
				t.Fatalf("w2 runs sector %d at epoch %d, but the owner is %q at %d", s, e, o, oe)
			}
		}
	}
	nLost := 0
	for _, err := range lost {
		if errors.Is(err, ErrLost) {
			nLost++
		}
	}
	if nLost != len(dead) {
		t.Fatalf("w2 ran %v before its pause; %d lost renewals after it: %v", dead, nLost, lost)
	}
	logs[2].checkValidAtLose(t)
	// A clean stop releases at once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := keepers[0].Run(cctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := logs[0].sectors(); len(got) != 0 {
		t.Fatalf("w0 still runs %v after its stop", got)
	}
	logs[0].checkValidAtLose(t) // hand-overs to w1 and w2, then the clean stop
	waitFor(t, "w1 and w2 to take everything", func() bool {
		round(1, 2)
		return ownedOnce([]int{1, 2})
	})
}

func FuzzDecodeLeaseValue(f *testing.F) {
	f.Add(EncodeLeaseValue(LeaseValue{Worker: "w1", Epoch: 7}))
	f.Add(EncodeLeaseValue(LeaseValue{Worker: "a"}))
	f.Add([]byte("BSLV"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeLeaseValue(b)
		if err != nil {
			return
		}
		if got, err := DecodeLeaseValue(EncodeLeaseValue(v)); err != nil || got != v {
			t.Fatalf("round trip of %+v: %+v, %v", v, got, err)
		}
	})
}

// TestWorkersWatchedAndListed checks that Workers answers the same from
// the registrations' watch (WatchWorkers) as from a listing: registered
// workers are live, a deregistered one is gone at once, and one whose
// registration is older than the TTL and its margin is left out even
// before the server removes it.
func TestWorkersWatchedAndListed(t *testing.T) {
	js := startNATS(t)
	a, b := openLeases(t, js(), "a"), openLeases(t, js(), "b")
	ctx := ctxT(t)
	for _, l := range []*Leases{a, b} {
		if err := l.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop := a.WatchWorkers(ctx)
	defer stop()
	want := func(what string, ids ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			listed, err := b.Workers(ctx) // no watch: a listing
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Register(ctx); err != nil { // keeps a's watch answering
				t.Fatal(err)
			}
			watched, ok := a.watched(testTTL + time.Duration(float64(testTTL)*ExpiryMargin))
			if ok && slices.Equal(watched, ids) && slices.Equal(listed, ids) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: watched %v (answering %v), listed %v, want %v", what, watched, ok, listed, ids)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("both registered", "a", "b")
	if err := b.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	want("b deregistered", "a")
	if err := b.Register(ctx); err != nil {
		t.Fatal(err)
	}
	want("b registered again", "a", "b")
	// b stops renewing: it is out once its registration is older than the
	// TTL and the margin (a keeps registering).
	want("b silent", "a")
}
