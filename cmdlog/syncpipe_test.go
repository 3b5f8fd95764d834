package cmdlog

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
)

// gateWAL is a pipelined WAL in memory whose syncs take as long as the
// test says: while the gate is shut a sync waits until it opens, and
// otherwise it takes up to delay. It records which records' writes were
// synced (their wait returned).
type gateWAL struct {
	mem   node.MemWAL
	mu    sync.Mutex
	gate  chan struct{} // closed: open
	delay time.Duration
	// synced holds the records whose write's wait returned.
	synced map[msg.RecordID]bool
	// started holds the records whose write began.
	started map[msg.RecordID]string
	rng     *rand.Rand
}

func newGateWAL(seed uint64, delay time.Duration) *gateWAL {
	g := &gateWAL{gate: make(chan struct{}), delay: delay, synced: map[msg.RecordID]bool{}, started: map[msg.RecordID]string{}, rng: rand.New(rand.NewPCG(seed, 1))}
	close(g.gate)
	return g
}

func (g *gateWAL) shut() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }
func (g *gateWAL) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

func (g *gateWAL) markSynced(ops []seq.PersistOp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, op := range ops {
		for _, r := range op.Records {
			g.synced[r.ID] = true
		}
		// A follower may learn a record from the leader's GC (the record
		// ordered, and stored on the shards) before the client's Append
		// reaches it; it then acknowledges the Append on the strength of
		// that GC.
		for _, id := range op.GC.IDs {
			g.synced[id] = true
		}
		if cp := op.Checkpoint; cp != nil {
			for _, r := range cp.Unordered {
				g.synced[r.ID] = true
			}
			for _, e := range cp.Ordered {
				g.synced[e.Record.ID] = true
			}
		}
	}
}

func (g *gateWAL) isSynced(id msg.RecordID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.synced[id]
}

func (g *gateWAL) Append(ops []seq.PersistOp) error {
	g.mem.Append(ops)
	g.markSynced(ops)
	return nil
}

func (g *gateWAL) Load() ([]seq.PersistOp, error) { return g.mem.Load() }

func (g *gateWAL) StartAppend(ops []seq.PersistOp) (func() error, func(), error) {
	g.mem.Append(ops)
	g.mu.Lock()
	for i, op := range ops {
		for _, r := range op.Records {
			g.started[r.ID] = fmt.Sprintf("op %d of %d, kind %d", i, len(ops), op.Kind)
		}
	}
	gate := g.gate
	var d time.Duration
	if g.delay > 0 {
		d = time.Duration(g.rng.Int64N(int64(g.delay)))
	}
	g.mu.Unlock()
	wait := func() error {
		<-gate
		time.Sleep(d)
		g.markSynced(ops)
		return nil
	}
	return wait, func() {}, nil
}

// ackCheckNet is a LocalNet that checks every AppendAck a replica sends
// against its WAL: each acknowledged record's write must be synced. It
// counts heartbeats and view changes.
type ackCheckNet struct {
	*node.LocalNet
	wals       map[msg.NodeID]*gateWAL
	acks       atomic.Int64
	heartbeats atomic.Int64
	startViews atomic.Int64
	mu         sync.Mutex
	early      []string
}

func (n *ackCheckNet) Send(env msg.Envelope) {
	switch m := env.Msg.(type) {
	case msg.AppendAck:
		n.acks.Add(1)
		for _, id := range m.IDs {
			// Only the records a replica wrote itself are checked: a
			// replica also acknowledges records it knows otherwise (its
			// dedup marks, from the leader's GCs or a client's floor),
			// as it did with a WAL synced in series (checked: a sync
			// WAL gives such acknowledgements too).
			w := n.wals[env.From]
			if w == nil {
				continue
			}
			w.mu.Lock()
			st, wrote := w.started[id]
			early := wrote && !w.synced[id]
			w.mu.Unlock()
			if early {
				n.mu.Lock()
				n.early = append(n.early, fmt.Sprintf("replica %d acknowledged %v before its write (%s) was synced", env.From, id, st))
				n.mu.Unlock()
			}
		}
	case msg.Heartbeat, msg.HeartbeatAck:
		n.heartbeats.Add(1)
	case msg.StartView:
		n.startViews.Add(1)
	}
	n.LocalNet.Send(env)
}

func (n *ackCheckNet) violations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.early...)
}

func startGateCluster(t *testing.T, delay time.Duration) (*LocalCluster, *ackCheckNet) {
	t.Helper()
	net := &ackCheckNet{LocalNet: node.NewLocalNet(), wals: map[msg.NodeID]*gateWAL{}}
	var mu sync.Mutex
	lc, err := StartLocal(context.Background(), LocalConfig{
		Coordinator: &testCoord{}, Network: net, Durability: seq.Fsync, Logger: slog.New(slog.DiscardHandler),
		NewStorage: func(msg.NodeID) (shard.Storage, error) { return shardstore.NewMemory(), nil },
		NewWAL: func(id msg.NodeID) (node.WAL, error) {
			mu.Lock()
			defer mu.Unlock()
			w := newGateWAL(uint64(id), delay)
			net.wals[id] = w
			return w, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return lc, net
}

// TestFsyncAckWaitsForSync: in fsync durability a replica's AppendAck
// leaves only after the write holding the record returned from its sync.
// With every WAL's syncs shut, an append stays unacknowledged (no replica
// sends an AppendAck, the append does not return) for longer than the
// suspicion time, while the replicas keep exchanging heartbeats and no
// view change starts; once the syncs are released, the append completes.
func TestFsyncAckWaitsForSync(t *testing.T) {
	lc, net := startGateCluster(t, 0)
	c := lc.NewClient(ClientConfig{})
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 5 {
		if err := c.AppendWithID(ctx, msg.RecordID{Client: 7, Seq: uint64(i + 1)}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CheckTail(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range net.wals {
		w.shut()
	}
	t.Cleanup(func() { // before the cluster's Close, which waits for the syncs
		for _, w := range net.wals {
			w.open()
		}
	})
	acks, beats, views := net.acks.Load(), net.heartbeats.Load(), net.startViews.Load()
	done := make(chan error, 1)
	go func() { done <- c.AppendWithID(ctx, msg.RecordID{Client: 7, Seq: 6}, []byte("y")) }()
	// 450 ms: 1.5 times the default suspicion time (60 ticks of 5 ms).
	select {
	case err := <-done:
		t.Fatalf("the append returned (%v) while no sync could return", err)
	case <-time.After(450 * time.Millisecond):
	}
	if n := net.acks.Load() - acks; n != 0 {
		t.Fatalf("%d AppendAcks left while every sync was held", n)
	}
	if n := net.heartbeats.Load() - beats; n == 0 {
		t.Fatal("no heartbeat left while the syncs were held")
	}
	if n := net.startViews.Load() - views; n != 0 {
		t.Fatalf("%d StartViews while the syncs were held (a view change)", n)
	}
	for _, w := range net.wals {
		w.open()
	}
	if err := <-done; err != nil {
		t.Fatalf("the append after the syncs were released: %v", err)
	}
	if v := net.violations(); len(v) > 0 {
		t.Fatalf("%d acknowledgements before their sync, first: %s", len(v), v[0])
	}
}

// TestFsyncAcksAfterSyncUnderLoad: concurrent appends against WALs whose
// syncs take a random 0–500 µs; every AppendAck any replica sends must
// follow its record's sync, and every append completes exactly once.
func TestFsyncAcksAfterSyncUnderLoad(t *testing.T) {
	lc, net := startGateCluster(t, 500*time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const appenders, each = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := lc.NewClient(ClientConfig{})
			defer c.Close()
			for i := range each {
				if err := c.AppendWithID(ctx, msg.RecordID{Client: uint64(100 + a), Seq: uint64(i + 1)}, []byte{byte(i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if net.acks.Load() == 0 {
		t.Fatal("no AppendAck seen")
	}
	if v := net.violations(); len(v) > 0 {
		t.Fatalf("%d acknowledgements before their sync, first: %s", len(v), v[0])
	}
	c := lc.NewClient(ClientConfig{})
	defer c.Close()
	if _, err := c.CheckTail(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[msg.RecordID]int{}
	for pos := uint64(1); len(seen) < appenders*each; {
		es, err := c.Read(ctx, pos, 500)
		if err != nil {
			t.Fatalf("read from %d (have %d): %v", pos, len(seen), err)
		}
		for _, e := range es {
			seen[e.Record.ID]++
			pos = e.Pos + 1
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("record %v is in the log %d times", id, n)
		}
	}
}
