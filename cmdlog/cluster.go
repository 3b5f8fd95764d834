package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// Well-known node id ranges of a cluster: sequencing replicas are 1..,
// shards 101.., clients pick ids above 1<<24.
const (
	FirstReplicaID msg.NodeID = 1
	FirstShardID   msg.NodeID = mesh.FirstShardID
)

// Bootstrap writes the initial view record (view 1 of members, led by the
// first) unless a record exists. It returns the record now stored.
func Bootstrap(ctx context.Context, c coord.Coordinator, members []msg.NodeID) (msg.ViewRecord, error) {
	if len(members) == 0 {
		return msg.ViewRecord{}, errors.New("cmdlog: bootstrap: no members")
	}
	v, _, err := c.Get(ctx)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, coord.ErrNotFound) {
		return msg.ViewRecord{}, fmt.Errorf("cmdlog: bootstrap: %w", err)
	}
	v = msg.ViewRecord{Number: 1, Members: append([]msg.NodeID(nil), members...), Leader: members[0]}
	if _, err := c.CompareAndSet(ctx, 0, v); err != nil && !errors.Is(err, coord.ErrConflict) {
		return msg.ViewRecord{}, fmt.Errorf("cmdlog: bootstrap: %w", err)
	}
	v, _, err = c.Get(ctx)
	return v, err
}

// LocalConfig configures an in-process cluster.
type LocalConfig struct {
	Replicas   int // default 3
	Shards     int // default 2
	StripeUnit uint64
	Durability seq.Durability
	Timing     node.Timing
	// Coordinator stores views (required).
	Coordinator coord.Coordinator
	// Network connects the nodes (required). LocalNet, or a QUIC mesh.
	Network Network
	// NewStorage returns shard i's storage; called once per shard, the
	// storage is kept across restarts.
	NewStorage func(id msg.NodeID) (shard.Storage, error)
	// NewWAL returns replica i's WAL; kept across restarts. Default MemWAL.
	NewWAL func(id msg.NodeID) (node.WAL, error)
	// Core tunes the replicas (ID and Layout are set by the cluster).
	Core   seq.Config
	Logger *slog.Logger
	// Health, if set, lists the nodes whose storage cannot write.
	Health *node.StorageHealth
}

// Network is a transport that nodes attach their inboxes to.
type Network interface {
	node.Transport
	Register(id msg.NodeID, in node.Inbox)
	Unregister(id msg.NodeID)
}

// LocalCluster runs sequencing replicas and shards in this process; it can
// stop and restart any of them (a stopped replica keeps only its WAL, a
// stopped shard only its storage), for tests, demos and the embedded mode
// of the game server.
type LocalCluster struct {
	cfg      LocalConfig
	layout   msg.Layout
	replicas []msg.NodeID
	mu       sync.Mutex
	nodes    map[msg.NodeID]*runningNode
	storage  map[msg.NodeID]shard.Storage
	wals     map[msg.NodeID]node.WAL
	errs     chan error
}

type runningNode struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartLocal bootstraps the view record if needed and starts every node.
func StartLocal(ctx context.Context, cfg LocalConfig) (*LocalCluster, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 2
	}
	if cfg.StripeUnit == 0 {
		cfg.StripeUnit = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NewWAL == nil {
		cfg.NewWAL = func(msg.NodeID) (node.WAL, error) { return &node.MemWAL{}, nil }
	}
	lc := &LocalCluster{cfg: cfg, nodes: map[msg.NodeID]*runningNode{}, storage: map[msg.NodeID]shard.Storage{},
		wals: map[msg.NodeID]node.WAL{}, errs: make(chan error, 16)}
	lc.layout.StripeUnit = cfg.StripeUnit
	for i := range cfg.Shards {
		id := FirstShardID + msg.NodeID(i)
		lc.layout.Shards = append(lc.layout.Shards, id)
		st, err := cfg.NewStorage(id)
		if err != nil {
			return nil, fmt.Errorf("cmdlog: shard %d storage: %w", id, err)
		}
		lc.storage[id] = st
	}
	for i := range cfg.Replicas {
		id := FirstReplicaID + msg.NodeID(i)
		lc.replicas = append(lc.replicas, id)
		w, err := cfg.NewWAL(id)
		if err != nil {
			return nil, fmt.Errorf("cmdlog: replica %d wal: %w", id, err)
		}
		lc.wals[id] = w
	}
	if _, err := Bootstrap(ctx, cfg.Coordinator, lc.replicas); err != nil {
		return nil, err
	}
	for _, id := range lc.layout.Shards {
		lc.StartNode(id)
	}
	for _, id := range lc.replicas {
		lc.StartNode(id)
	}
	return lc, nil
}

// Layout returns the cluster's shard layout.
func (lc *LocalCluster) Layout() msg.Layout { return lc.layout }

// Replicas returns the sequencing replicas' ids.
func (lc *LocalCluster) Replicas() []msg.NodeID { return append([]msg.NodeID(nil), lc.replicas...) }

// Errors reports nodes that stopped with an error.
func (lc *LocalCluster) Errors() <-chan error { return lc.errs }

// StartNode (re)starts a stopped node.
func (lc *LocalCluster) StartNode(id msg.NodeID) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.nodes[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runningNode{cancel: cancel, done: make(chan struct{})}
	lc.nodes[id] = rn
	in := node.NewInbox()
	lc.cfg.Network.Register(id, in)
	go func() {
		defer close(rn.done)
		var err error
		if id >= FirstShardID {
			err = node.RunShard(ctx, node.ShardConfig{
				Core:    shard.Config{ID: id, Layout: lc.layout, Replicas: lc.replicas},
				Storage: lc.storage[id], Transport: lc.cfg.Network, Inbox: in, Logger: lc.cfg.Logger,
				Health: lc.cfg.Health,
			})
		} else {
			core := lc.cfg.Core
			core.ID, core.Layout, core.Durability, core.Replicas = id, lc.layout, lc.cfg.Durability, lc.replicas
			err = node.RunSeq(ctx, node.SeqConfig{
				Core: core, Timing: lc.cfg.Timing, Coordinator: lc.cfg.Coordinator, WAL: lc.wals[id],
				Transport: lc.cfg.Network, Inbox: in, Logger: lc.cfg.Logger, Health: lc.cfg.Health,
			})
		}
		if err != nil {
			select {
			case lc.errs <- fmt.Errorf("node %d: %w", id, err):
			default:
			}
		}
	}()
}

// StopNode stops a node as a crash would: a replica keeps its WAL (in
// memory durability: only which views it served), a shard its storage.
func (lc *LocalCluster) StopNode(id msg.NodeID) {
	lc.mu.Lock()
	rn := lc.nodes[id]
	delete(lc.nodes, id)
	lc.mu.Unlock()
	if rn == nil {
		return
	}
	lc.cfg.Network.Unregister(id)
	rn.cancel()
	<-rn.done
}

// NewClient returns a client of this cluster attached to its network.
func (lc *LocalCluster) NewClient(cfg ClientConfig) *Client {
	cfg.Layout = lc.layout
	if cfg.Coordinator == nil {
		cfg.Coordinator = lc.cfg.Coordinator
	}
	cfg.Transport = lc.cfg.Network
	if cfg.Timing.Tick == 0 {
		cfg.Timing = lc.cfg.Timing
	}
	cfg.Inbox = node.NewInbox()
	c := NewClient(cfg)
	lc.cfg.Network.Register(c.ID(), cfg.Inbox)
	return c
}

// Close stops every node.
func (lc *LocalCluster) Close() {
	lc.mu.Lock()
	ids := make([]msg.NodeID, 0, len(lc.nodes))
	for id := range lc.nodes {
		ids = append(ids, id)
	}
	lc.mu.Unlock()
	for _, id := range ids {
		lc.StopNode(id)
	}
}
