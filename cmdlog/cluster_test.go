package cmdlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/netcode/transport"
)

type testCoord struct {
	mu  sync.Mutex
	v   msg.ViewRecord
	rev uint64
}

func (c *testCoord) Get(context.Context) (msg.ViewRecord, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rev == 0 {
		return msg.ViewRecord{}, 0, coord.ErrNotFound
	}
	return c.v.Clone(), c.rev, nil
}

func (c *testCoord) CompareAndSet(_ context.Context, expect uint64, v msg.ViewRecord) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if expect != c.rev {
		return 0, coord.ErrConflict
	}
	c.v, c.rev = v.Clone(), c.rev+1
	return c.rev, nil
}

func startTestCluster(t *testing.T) *LocalCluster {
	t.Helper()
	lc, err := StartLocal(context.Background(), LocalConfig{
		Coordinator: &testCoord{},
		Network:     node.NewLocalNet(),
		Timing:      node.Timing{Tick: 2 * time.Millisecond},
		NewStorage:  func(msg.NodeID) (shard.Storage, error) { return shardstore.NewMemory(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return lc
}

// appendAll appends n records concurrently from k goroutines and returns
// the data of the acknowledged ones.
func appendAll(t *testing.T, c *Client, tag string, n, k int) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += k {
				d := fmt.Sprintf("%s-%d", tag, i)
				if err := c.Append(ctx, []byte(d)); err != nil {
					t.Errorf("append %s: %v", d, err)
					return
				}
				mu.Lock()
				acked[d] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return acked
}

func readAll(t *testing.T, c *Client, tail uint64) []msg.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := c.Subscribe(1)
	var out []msg.Entry
	for sub.Position() <= tail {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("read at %d: %v", sub.Position(), err)
		}
		out = append(out, e)
	}
	return out
}

func checkExactlyOnce(t *testing.T, entries []msg.Entry, acked map[string]bool) {
	t.Helper()
	seen := map[string]uint64{}
	for i, e := range entries {
		if e.Pos != uint64(i+1) {
			t.Fatalf("entry %d has position %d", i, e.Pos)
		}
		if p, dup := seen[string(e.Record.Data)]; dup {
			t.Fatalf("%q at positions %d and %d", e.Record.Data, p, e.Pos)
		}
		seen[string(e.Record.Data)] = e.Pos
	}
	for d := range acked {
		if _, ok := seen[d]; !ok {
			t.Fatalf("acknowledged append %q lost", d)
		}
	}
}

func TestLocalClusterAppendRead(t *testing.T) {
	lc := startTestCluster(t)
	c := lc.NewClient(ClientConfig{})
	defer c.Close()
	acked := appendAll(t, c, "a", 2000, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail, err := c.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != 2000 {
		t.Fatalf("tail %d, want 2000", tail)
	}
	checkExactlyOnce(t, readAll(t, c, tail), acked)
}

func TestLocalClusterReplicaCrash(t *testing.T) {
	lc := startTestCluster(t)
	c := lc.NewClient(ClientConfig{})
	defer c.Close()
	acked := appendAll(t, c, "before", 500, 8)
	// Crash the leader (replica 1 leads view 1), keep appending, restart it.
	lc.StopNode(1)
	for k, v := range appendAll(t, c, "during", 500, 8) {
		acked[k] = v
	}
	lc.StartNode(1)
	for k, v := range appendAll(t, c, "after", 500, 8) {
		acked[k] = v
	}
	lc.StopNode(FirstShardID)
	lc.StartNode(FirstShardID)
	for k, v := range appendAll(t, c, "shard", 200, 8) {
		acked[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail, err := c.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != uint64(len(acked)) {
		t.Fatalf("tail %d, want %d", tail, len(acked))
	}
	checkExactlyOnce(t, readAll(t, c, tail), acked)
}

func TestQUICClusterAppendReadWithCrash(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	server, client, err := ca.MutualTLS("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	g := mesh.NewGroup(server, client, nil)
	defer g.Close()
	lc, err := StartLocal(context.Background(), LocalConfig{
		Coordinator: &testCoord{},
		Network:     g,
		Timing:      node.Timing{Tick: 2 * time.Millisecond},
		NewStorage:  func(msg.NodeID) (shard.Storage, error) { return shardstore.NewMemory(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c := lc.NewClient(ClientConfig{})
	defer c.Close()
	acked := appendAll(t, c, "q", 1000, 16)
	lc.StopNode(2)
	for k, v := range appendAll(t, c, "after-crash", 500, 16) {
		acked[k] = v
	}
	lc.StartNode(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail, err := c.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != uint64(len(acked)) {
		t.Fatalf("tail %d, want %d", tail, len(acked))
	}
	checkExactlyOnce(t, readAll(t, c, tail), acked)
}

// TestLocalClusterFloorClosesHoles: a producer whose ids have holes (the
// game server's sessions: commands it refused are never appended) closes
// them with its floor; without it, every id more than
// dedup.DefaultWindow-1 above the hole is refused busy until its lease
// runs out.
func TestLocalClusterFloorClosesHoles(t *testing.T) {
	lc := startTestCluster(t)
	c := lc.NewClient(ClientConfig{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const client = 1<<63 | 77
	appendOne := func(seq, floor uint64) error {
		done := make(chan error, 1)
		if err := c.AppendWithFloorAsync(ctx, msg.RecordID{Client: client, Seq: seq}, floor, []byte(fmt.Sprint(seq)), func(err error) { done <- err }); err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-time.After(2 * time.Second):
			return fmt.Errorf("append %d: no outcome in 2 s", seq)
		}
	}
	// Ids 2 and 5 are refused by the producer: holes.
	var stored int
	for seq := uint64(1); seq <= 3*dedup.DefaultWindow; seq++ {
		if seq == 2 || seq == 5 {
			continue
		}
		floor := seq // everything below seq is stored or refused
		if err := appendOne(seq, floor); err != nil {
			t.Fatalf("id %d with floor %d: %v", seq, floor, err)
		}
		stored++
	}
	// Without a floor, an id far above a hole is refused (busy, retried):
	// no outcome within the test's patience.
	const other = 1<<63 | 78
	done := make(chan error, 1)
	if err := c.AppendWithIDAsync(ctx, msg.RecordID{Client: other, Seq: 2 + dedup.DefaultWindow}, []byte("far"), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("an id %d above its client's mark completed (%v): the window does not hold", 2+dedup.DefaultWindow, err)
	case <-time.After(500 * time.Millisecond):
	}
	tail, err := c.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != uint64(stored) {
		t.Fatalf("tail %d, want %d", tail, stored)
	}
}
