package logbench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/cmdlog/wal"
	"github.com/anoptic/broadside/netcode/transport"
)

// lazylog is cmdlog as the game server embeds it: 3 sequencing replicas and
// 2 shards in this process, each node with its own QUIC endpoint on
// 127.0.0.1 (mesh.Group), shards on synced Pebble stores, one client.
type lazylog struct {
	group  *mesh.Group
	net    *countingNet
	lc     *cmdlog.LocalCluster
	client *cmdlog.Client
	stores []*shardstore.Pebble
	wals   []*wal.Pebble
	acked  atomic.Int64
	// lastDiag holds the counters at the last Diagnostics call.
	lastDiag [5]int64
	// lastViews is the StartView count at the last Diagnostics call.
	lastViews int64
}

// countingNet counts what crosses the network, to tell the work an append
// causes (records sent to replicas, retries included; entries stored on
// shards) from what it should cause.
type countingNet struct {
	*mesh.Group
	appendRecords  atomic.Int64 // records in Append messages, all replicas
	appendMessages atomic.Int64
	storeEntries   atomic.Int64 // entries in Store messages, all shards
	messages       atomic.Int64
	// byKind counts messages per kind (index msg.Kind).
	byKind [32]atomic.Int64
}

// KindCounts returns the messages sent so far per kind.
func (n *countingNet) KindCounts() map[msg.Kind]int64 {
	out := map[msg.Kind]int64{}
	for k := range n.byKind {
		if v := n.byKind[k].Load(); v > 0 {
			out[msg.Kind(k)] = v
		}
	}
	return out
}

func (n *countingNet) Send(env msg.Envelope) {
	n.messages.Add(1)
	if k := int(env.Msg.Kind()); k < len(n.byKind) {
		n.byKind[k].Add(1)
	}
	switch m := env.Msg.(type) {
	case msg.Append:
		n.appendRecords.Add(int64(len(m.Records)))
		n.appendMessages.Add(1)
	case msg.Store:
		n.storeEntries.Add(int64(len(m.Entries)))
	}
	n.Group.Send(env)
}

func startLazylog(ctx context.Context, env Env, fsync bool) (_ System, err error) {
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	server, client, err := ca.MutualTLS("localhost", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	l := &lazylog{group: mesh.NewGroup(server, client, env.Logger)}
	l.net = &countingNet{Group: l.group}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	cfg := cmdlog.LocalConfig{
		Replicas:    3,
		Shards:      2,
		Durability:  seq.Memory,
		Coordinator: coord.NewMemory(),
		Network:     l.net,
		Logger:      env.Logger,
		NewStorage: func(id msg.NodeID) (shard.Storage, error) {
			p, err := shardstore.Open(filepath.Join(env.Dir, fmt.Sprintf("shard-%d", id)),
				shardstore.Options{Durability: shardstore.SyncWrites, Logger: env.Logger})
			if err != nil {
				return nil, err
			}
			l.stores = append(l.stores, p)
			return p, nil
		},
	}
	if fsync {
		cfg.Durability = seq.Fsync
		cfg.NewWAL = func(id msg.NodeID) (node.WAL, error) {
			w, err := wal.Open(filepath.Join(env.Dir, fmt.Sprintf("wal-%d", id)), wal.Options{})
			if err != nil {
				return nil, err
			}
			l.wals = append(l.wals, w)
			return w, nil
		}
	}
	if err := l.start(ctx, cfg, "lazylog"); err != nil {
		return nil, err
	}
	return l, nil
}

// start starts the cluster cfg describes and its client, and waits until
// an append succeeds (name is the contender's, for the error).
func (l *lazylog) start(ctx context.Context, cfg cmdlog.LocalConfig, name string) error {
	var err error
	if l.lc, err = cmdlog.StartLocal(ctx, cfg); err != nil {
		return err
	}
	l.client = l.lc.NewClient(cmdlog.ClientConfig{})
	// The first append waits for the view and the links; do it here.
	if err := waitReady(ctx, l.client.Append); err != nil {
		return fmt.Errorf("%s: cluster not ready: %w", name, err)
	}
	l.lastViews = l.net.byKind[msg.KindStartView].Load() // the first view is no change
	return nil
}

// waitReady appends until one append succeeds (bounded to 15 s).
func waitReady(ctx context.Context, appendFn func(context.Context, []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		err := appendFn(actx, []byte("ready"))
		acancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
}

func (l *lazylog) Append(ctx context.Context, data []byte) error {
	err := l.client.Append(ctx, data)
	if err == nil {
		l.acked.Add(1)
	}
	return err
}

// Diagnostics reports the work per acknowledged append since the last
// call: with 3 replicas and no resends, 3 records sent in Append messages
// and 1 entry stored.
func (l *lazylog) Diagnostics() string {
	now := [5]int64{l.acked.Load(), l.net.appendRecords.Load(), l.net.appendMessages.Load(),
		l.net.storeEntries.Load(), l.net.messages.Load()}
	var d [5]float64
	for i := range now {
		d[i] = float64(now[i] - l.lastDiag[i])
	}
	l.lastDiag = now
	acked := d[0]
	if acked == 0 {
		return ""
	}
	views := l.net.byKind[msg.KindStartView].Load()
	newViews := float64(views-l.lastViews) / 2 // a leader tells its 2 followers
	l.lastViews = views
	return fmt.Sprintf("per acked append: %.2f records sent to replicas (3 = no resends), %.2f entries stored on shards (1 = no resends), %.2f messages of all kinds; %.1f records per Append message; %.0f view changes",
		d[1]/acked, d[3]/acked, d[4]/acked, d[1]/max(d[2], 1), newViews)
}

// Settle waits for ordering: CheckTail answers once every append completed
// before it is at a stable position.
func (l *lazylog) Settle(ctx context.Context) error {
	_, err := l.client.CheckTail(ctx)
	return err
}

func (l *lazylog) Close() error {
	if l.client != nil {
		l.client.Close()
	}
	if l.lc != nil {
		l.lc.Close()
	}
	l.group.Close()
	var errs []error
	for _, s := range l.stores {
		errs = append(errs, s.Close())
	}
	for _, w := range l.wals {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}
