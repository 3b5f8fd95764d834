package jsstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore/storagetest"
)

// cluster is a 3-node JetStream cluster (sync always) shared by the tests
// that do not kill nodes.
var cluster *natscoord.Cluster

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jsstore")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster, err = natscoord.StartCluster(3, dir, natscoord.ClusterOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cluster.Shutdown()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var streamSeq atomic.Int64

// newStream returns a fresh stream name.
func newStream() string { return fmt.Sprintf("shardtest-%d", streamSeq.Add(1)) }

func connect(t *testing.T, c *natscoord.Cluster) jetstream.JetStream {
	t.Helper()
	nc, err := c.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, js jetstream.JetStream, opts Options) *Store {
	t.Helper()
	s, err := Open(ctxFor(t), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// harness opens each store on a fresh R3 stream; a reopen drops the store
// without Close (a crash of the shard node) and opens the stream again on a
// new connection, as a restarted node with an empty disk would.
func harness(maxMsg int) storagetest.Harness {
	return storagetest.Harness{
		Open: func(t *testing.T) shard.Storage {
			return open(t, connect(t, cluster), Options{Stream: newStream(), MaxMessageBytes: maxMsg})
		},
		Reopen: func(t *testing.T, s shard.Storage) shard.Storage {
			return open(t, connect(t, cluster), s.(*Store).opts)
		},
	}
}

func TestConformance(t *testing.T) {
	t.Run("R3", func(t *testing.T) { storagetest.Run(t, harness(0)) })
	// Small messages: every group of more than a few entries is split.
	t.Run("R3 chunked", func(t *testing.T) { storagetest.Run(t, harness(200)) })
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) (msgs, first, last uint64) {
	t.Helper()
	st, err := js.Stream(ctxFor(t), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.FirstSeq, info.State.LastSeq
}

// TestStreamIsR3 checks the stream Open creates: three replicas, file
// storage, nothing discarded to make room.
func TestStreamIsR3(t *testing.T) {
	js := connect(t, cluster)
	s := open(t, js, Options{Stream: newStream()})
	st, err := js.Stream(ctxFor(t), s.opts.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Replicas != 3 || c.Storage != jetstream.FileStorage || c.Discard != jetstream.DiscardNew || c.MaxMsgs != -1 {
		t.Fatalf("stream config %+v", c)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("cluster info %+v, want a leader and 2 replicas", info.Cluster)
	}
}

// TestTrimPurges checks that a trim purges the messages below the oldest
// one still needed and that the rest replays to the same state.
func TestTrimPurges(t *testing.T) {
	js := connect(t, cluster)
	s := open(t, js, Options{Stream: newStream()})
	for from := uint64(1); from <= 1000; from += 100 {
		if err := s.Apply(shard.Writes{Puts: storagetest.Range(from, from+99, "a"), Meta: &shard.Meta{Epoch: 1, StableGP: from + 99}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, _ := streamMsgs(t, js, s.opts.Stream); n != 10 {
		t.Fatalf("%d messages before the trim, want 10", n)
	}
	// Positions 1..450 go: the groups of 1..100 .. 301..400 are dead, the
	// one of 401..500 still holds 451..500.
	meta := shard.Meta{Epoch: 1, StableGP: 1000, Trimmed: 450}
	if err := s.Apply(shard.Writes{TrimTo: 450, Meta: &meta}); err != nil {
		t.Fatal(err)
	}
	if n, first, _ := streamMsgs(t, js, s.opts.Stream); n != 7 || first != 5 {
		t.Fatalf("after the trim: %d messages from %d, want 7 from 5", n, first)
	}
	want := storagetest.State{Entries: storagetest.Range(451, 1000, "a"), Meta: meta}
	storagetest.CheckState(t, s, want)
	storagetest.CheckState(t, open(t, connect(t, cluster), s.opts), want)
	// Trim everything: only the trim's own group (the Meta) is left.
	meta = shard.Meta{Epoch: 1, StableGP: 1000, Trimmed: 1000}
	if err := s.Apply(shard.Writes{TrimTo: 1000, Meta: &meta}); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := streamMsgs(t, js, s.opts.Stream); n != 1 {
		t.Fatalf("after trimming everything: %d messages, want 1", n)
	}
	storagetest.CheckState(t, open(t, connect(t, cluster), s.opts), storagetest.State{Meta: meta})
}

// TestRewriteAboveStable is the view-change flush: positions above
// stable-gp are truncated and written again with other records, and a
// restart sees the new ones.
func TestRewriteAboveStable(t *testing.T) {
	js := connect(t, cluster)
	s := open(t, js, Options{Stream: newStream()})
	steps := []shard.Writes{
		{Puts: storagetest.Range(1, 20, "old"), Meta: &shard.Meta{Epoch: 1}},
		{Meta: &shard.Meta{Epoch: 1, StableGP: 10}, Lazy: true},
		{Puts: storagetest.Range(11, 15, "new"), HasDeleteAbove: true, DeleteAbove: 15, Meta: &shard.Meta{Epoch: 2, StableGP: 10}},
	}
	for _, w := range steps {
		if err := s.Apply(w); err != nil {
			t.Fatal(err)
		}
	}
	want := storagetest.State{
		Entries: append(storagetest.Range(1, 10, "old"), storagetest.Range(11, 15, "new")...),
		Meta:    shard.Meta{Epoch: 2, StableGP: 10},
	}
	storagetest.CheckState(t, open(t, connect(t, cluster), s.opts), want)
}

// TestLazyMeta checks that a lazy Meta is visible at once, lost by a crash
// before the next Apply, and durable with it.
func TestLazyMeta(t *testing.T) {
	js := connect(t, cluster)
	s := open(t, js, Options{Stream: newStream()})
	if err := s.Apply(shard.Writes{Puts: storagetest.Range(1, 3, "a"), Meta: &shard.Meta{Epoch: 1, StableGP: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyLazy([]shard.Writes{{Meta: &shard.Meta{Epoch: 1, StableGP: 2}, Lazy: true}, {Meta: &shard.Meta{Epoch: 1, StableGP: 3}, Lazy: true}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Meta(); m.StableGP != 3 {
		t.Fatalf("meta after lazy writes %+v, want stable-gp 3", m)
	}
	if m, _ := open(t, connect(t, cluster), s.opts).Meta(); m.StableGP != 1 {
		t.Fatalf("meta after a crash before the next Apply %+v, want stable-gp 1 (lazy writes are not durable)", m)
	}
	if err := s.Apply(shard.Writes{Puts: storagetest.Range(4, 4, "a")}); err != nil {
		t.Fatal(err)
	}
	storagetest.CheckState(t, open(t, connect(t, cluster), s.opts),
		storagetest.State{Entries: storagetest.Range(1, 4, "a"), Meta: shard.Meta{Epoch: 1, StableGP: 3}})
}

// TestFenced checks that two stores on one stream cannot both write: the
// one that writes second fails, and keeps failing.
func TestFenced(t *testing.T) {
	js := connect(t, cluster)
	name := newStream()
	a := open(t, js, Options{Stream: name})
	b := open(t, connect(t, cluster), Options{Stream: name})
	if err := b.Apply(shard.Writes{Puts: storagetest.Range(1, 1, "b")}); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(shard.Writes{Puts: storagetest.Range(1, 1, "a")}); !errors.Is(err, ErrFenced) {
		t.Fatalf("second writer: %v, want ErrFenced", err)
	}
	if err := a.Apply(shard.Writes{Puts: storagetest.Range(2, 2, "a")}); err == nil {
		t.Fatal("a fenced store wrote again")
	}
	storagetest.CheckState(t, open(t, connect(t, cluster), Options{Stream: name}), storagetest.State{Entries: storagetest.Range(1, 1, "b")})
}

// TestUnfinishedGroupIgnored models a writer that died halfway through a
// split group: replay ignores the group, and the next writer goes on.
func TestUnfinishedGroupIgnored(t *testing.T) {
	js := connect(t, cluster)
	s := open(t, js, Options{Stream: newStream(), MaxMessageBytes: 200})
	if err := s.Apply(shard.Writes{Puts: storagetest.Range(1, 20, "a")}); err != nil {
		t.Fatal(err)
	}
	// The first chunk of a group that never finishes.
	body := appendBody(nil, []shard.Writes{{Puts: storagetest.Range(21, 40, "lost"), TrimTo: 5}})
	if _, err := js.Publish(ctxFor(t), s.opts.Subject, encodeChunk(s.last+1, false, body[:100])); err != nil {
		t.Fatal(err)
	}
	r := open(t, connect(t, cluster), s.opts)
	storagetest.CheckState(t, r, storagetest.State{Entries: storagetest.Range(1, 20, "a")})
	if err := r.Apply(shard.Writes{Puts: storagetest.Range(21, 30, "b")}); err != nil {
		t.Fatal(err)
	}
	storagetest.CheckState(t, open(t, connect(t, cluster), s.opts),
		storagetest.State{Entries: append(storagetest.Range(1, 20, "a"), storagetest.Range(21, 30, "b")...)})
}

// TestNATSNodeKilledUnderWrites stops each node of a 3-node cluster in
// turn (the stream's leader first) while a shard store writes, restarts
// it, and checks that every acknowledged write is on the stream: a fresh
// store replays all of them.
func TestNATSNodeKilledUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("kills NATS nodes; skipped with -short")
	}
	c, err := natscoord.StartCluster(3, t.TempDir(), natscoord.ClusterOptions{Name: "kill"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	js := connect(t, c)
	s := open(t, js, Options{Stream: newStream(), RetryFor: 20 * time.Second, PublishTimeout: 2 * time.Second})
	var acked atomic.Uint64 // positions 1..acked are acknowledged
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for pos := uint64(1); ; pos++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := s.Apply(shard.Writes{Puts: []msg.Entry{storagetest.E(pos, "k")}, Meta: &shard.Meta{Epoch: 1, StableGP: pos}}); err != nil {
				done <- fmt.Errorf("apply %d: %w", pos, err)
				return
			}
			acked.Store(pos)
		}
	}()
	waitAcked := func(n uint64) {
		t.Helper()
		target := acked.Load() + n
		deadline := time.Now().Add(30 * time.Second)
		for acked.Load() < target {
			select {
			case err := <-done:
				t.Fatalf("writer stopped: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d acknowledged writes, waiting for %d", acked.Load(), target)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	leader := func() int {
		st, err := js.Stream(ctxFor(t), s.opts.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range c.Nodes {
			if n.Server().Name() == info.Cluster.Leader {
				return i
			}
		}
		t.Fatalf("stream leader %q is none of the nodes", info.Cluster.Leader)
		return -1
	}
	waitCurrent := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := js.Stream(ctxFor(t), s.opts.Stream)
			if err == nil {
				info, err := st.Info(ctxFor(t))
				if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2 &&
					info.Cluster.Replicas[0].Current && info.Cluster.Replicas[1].Current {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream replicas not current after 30 s: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAcked(200)
	kills := 0
	victims := []int{leader()}
	for i := range c.Nodes {
		if i != victims[0] {
			victims = append(victims, i)
		}
	}
	for _, i := range victims {
		at := acked.Load()
		c.StopNode(i)
		kills++
		waitAcked(100) // writes go on with two of three
		t.Logf("stopped NATS node %d at %d acknowledged writes; %d by the restart", i+1, at, acked.Load())
		if err := c.RestartNode(i); err != nil {
			t.Fatal(err)
		}
		waitAcked(100)
		// Lose no second node before the restarted one has caught up: R3
		// survives one node lost at a time.
		waitCurrent()
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := acked.Load()
	r := open(t, connect(t, c), s.opts)
	got, err := storagetest.ScanAll(r, 0, n+1000)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for i, p := 0, uint64(1); p <= n; p++ {
		for i < len(got) && got[i].Pos < p {
			i++
		}
		if i >= len(got) || !storagetest.EqualEntry(got[i], storagetest.E(p, "k")) {
			lost++
		}
	}
	line := fmt.Sprintf("jsstore: %d NATS node kills, %d acked, %d lost", kills, n, lost)
	t.Log(line)
	if lost > 0 {
		t.Fatal(line)
	}
}
