package natscoord

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/coordtest"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// startServer starts an embedded server for the test and returns a
// JetStream context on a connection to it; both end with the test.
func startTestServer(t *testing.T) (*Embedded, jetstream.JetStream) {
	t.Helper()
	srv, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, connect(t, srv.ClientURL())
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // runs before the server's Shutdown (LIFO)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestNATSCoordinator(t *testing.T) {
	srv, js := startTestServer(t)
	if !srv.Server().JetStreamEnabled() || !srv.Server().JetStreamConfig().SyncAlways {
		t.Fatal("embedded server: JetStream or sync-always not enabled")
	}
	var n atomic.Int64
	coordtest.TestCoordinator(t, func(t *testing.T) coord.Coordinator {
		c, err := New(opCtx(t), js, Config{Cluster: fmt.Sprintf("cluster-%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

func TestNATSBucket(t *testing.T) {
	_, js := startTestServer(t)
	ctx := opCtx(t)
	a, err := New(ctx, js, Config{Cluster: "a", History: 3})
	if err != nil {
		t.Fatal(err)
	}
	// A second coordinator (another cluster, other settings) shares the
	// existing bucket as configured.
	b, err := New(ctx, js, Config{Cluster: "b.x", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if st.History() != 3 || info.Config.Storage != jetstream.FileStorage || info.Config.Replicas != 1 {
		t.Errorf("bucket: history %d, storage %v, replicas %d; want 3, file, 1", st.History(), info.Config.Storage, info.Config.Replicas)
	}
	// Keys are independent; revisions are the bucket's sequence numbers.
	ra, err := a.CompareAndSet(ctx, 0, coordtest.SampleRecord(1))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.CompareAndSet(ctx, 0, coordtest.SampleRecord(2))
	if err != nil {
		t.Fatal(err)
	}
	if ra != 1 || rb != 2 {
		t.Errorf("revisions %d, %d; want 1, 2", ra, rb)
	}
	if _, err := a.CompareAndSet(ctx, rb, coordtest.SampleRecord(3)); !errors.Is(err, coord.ErrConflict) {
		t.Errorf("CAS on a with b's revision = %v, want ErrConflict", err)
	}
	// A value that is not a view record is reported, not decoded into one.
	if _, err := kv.Put(ctx, "b.x", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx); !errors.Is(err, coord.ErrBadRecord) {
		t.Errorf("Get of garbage = %v, want ErrBadRecord", err)
	}
	// A deleted record reads as absent and can be created again.
	if err := kv.Delete(ctx, "b.x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx); !errors.Is(err, coord.ErrNotFound) {
		t.Errorf("Get after delete = %v, want ErrNotFound", err)
	}
	if _, err := b.CompareAndSet(ctx, 0, coordtest.SampleRecord(4)); err != nil {
		t.Errorf("create after delete: %v", err)
	}

	for _, cfg := range []Config{
		{}, {Cluster: "a b"}, {Cluster: ".a"}, {Cluster: "a."}, {Cluster: "a*"},
		{Cluster: "a", History: 6}, {Cluster: "a", Replicas: 6}, {Cluster: "a", Replicas: -1},
	} {
		if _, err := New(ctx, js, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestNATSWatchSkipsGarbage checks that Watch skips values that do not
// decode and deletions.
func TestNATSWatchSkipsGarbage(t *testing.T) {
	_, js := startTestServer(t)
	ctx := opCtx(t)
	c, err := New(ctx, js, Config{Cluster: "w"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	updates, err := c.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	kv := c.kv
	if _, err := kv.Put(ctx, "w", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	rev, err := c.CompareAndSet(ctx, 0, coordtest.SampleRecord(5))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-updates:
		if u.Rev != rev || !coordtest.SameRecord(u.View, coordtest.SampleRecord(5)) {
			t.Fatalf("update = %d %+v, want %d", u.Rev, u.View, rev)
		}
	case <-ctx.Done():
		t.Fatal("no update")
	}
	stop()
	for range updates {
	}
}

// TestNATSCluster runs the coordinator on a 3-node cluster with an R3
// bucket (where CAS conflicts carry the replicated error code 10164), then
// stops one node and checks that compare-and-set still works with the
// remaining majority.
func TestNATSCluster(t *testing.T) {
	start := time.Now()
	cl, err := StartCluster(3, t.TempDir(), ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	t.Logf("cluster ready in %v", time.Since(start).Round(time.Millisecond))
	nc, err := nats.Connect(cl.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := New(ctx, js, Config{Cluster: "r3", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; r != 3 {
		t.Fatalf("bucket has %d replicas, want 3", r)
	}
	rev, err := c.CompareAndSet(ctx, 0, coordtest.SampleRecord(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompareAndSet(ctx, 0, coordtest.SampleRecord(9)); !errors.Is(err, coord.ErrConflict) {
		t.Fatalf("second create on R3 = %v, want ErrConflict", err)
	}
	rev2, err := c.CompareAndSet(ctx, rev, coordtest.SampleRecord(2))
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	_, err = c.CompareAndSet(ctx, rev, coordtest.SampleRecord(9))
	if !errors.Is(err, coord.ErrConflict) {
		t.Fatalf("stale CAS on R3 = %v, want ErrConflict", err)
	}
	if errors.As(err, &apiErr) {
		t.Logf("stale CAS on R3: server error code %d", apiErr.ErrorCode)
	}

	// Stop the node that leads the bucket's stream: the other two, a
	// majority, must elect a new leader and accept the next CAS. The client
	// reconnects to another node if it was connected to this one.
	info, err := js.Stream(ctx, "KV_"+DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	victim := -1
	for i, node := range cl.Nodes {
		if node.Server().Name() == leader {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("stream leader %q is not a node", leader)
	}
	t.Logf("stopping the stream leader %s", leader)
	cl.Nodes[victim].Shutdown()
	stopped := time.Now()
	rev3, err := casRetrying(ctx, c, rev2, coordtest.SampleRecord(3))
	if err != nil {
		t.Fatalf("CAS with a node down: %v", err)
	}
	t.Logf("CAS succeeded %v after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	got, rev, err := c.Get(ctx)
	if err != nil || rev != rev3 || !coordtest.SameRecord(got, coordtest.SampleRecord(3)) {
		t.Fatalf("Get with a node down = %d, %v", rev, err)
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// casRetrying retries a CAS that failed for a reason other than a conflict
// (a stream leader election after a node stopped), first checking whether
// an earlier attempt took effect.
func casRetrying(ctx context.Context, c *KV, expect uint64, rec msg.ViewRecord) (uint64, error) {
	for {
		rev, err := c.CompareAndSet(ctx, expect, rec)
		if err == nil || errors.Is(err, coord.ErrConflict) {
			if errors.Is(err, coord.ErrConflict) {
				if got, r, gerr := c.Get(ctx); gerr == nil && coordtest.SameRecord(got, rec) {
					return r, nil // an earlier attempt succeeded
				}
			}
			return rev, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestEmbeddedErrors(t *testing.T) {
	if _, err := StartEmbedded(EmbeddedOptions{}); err == nil {
		t.Error("start without a store dir succeeded")
	}
	if _, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), Sync: 9}); err == nil {
		t.Error("start with an unknown sync policy succeeded")
	}
	if _, err := StartCluster(0, t.TempDir(), ClusterOptions{}); err == nil {
		t.Error("cluster of 0 nodes started")
	}
}
