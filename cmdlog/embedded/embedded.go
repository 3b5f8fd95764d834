// Package embedded runs a whole command log cluster inside one process, as
// 'broadside serve' and 'broadside demo' do by default: 3 sequencing
// replicas and 2 shards talking in process (Options.Network), shard stores and write-ahead
// logs in Pebble under a directory, and views in an embedded NATS
// JetStream KV persisted under it too, so that a restarted process finds
// its log's view. It links nats-server (the coordinator's adapter); the
// cmdlog core does not.
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/netcode/transport"
)

// Options configure an embedded cluster.
type Options struct {
	// Dir holds the shard stores, the write-ahead logs and the
	// coordinator's state (required).
	Dir string
	// Durability is when the sequencing replicas acknowledge: seq.Fsync
	// (after syncing a write-ahead log; the only mode a restarted process
	// can resume) or seq.Memory (from memory). The zero value is
	// seq.Memory: callers say which they want.
	Durability seq.Durability
	// OnAppendLatency, if set, observes every append of the players'
	// client (Log).
	OnAppendLatency func(time.Duration)
	// Logger receives the cluster's messages (nil: errors only, to
	// stderr).
	Logger *slog.Logger
	// Network is how the nodes talk: InProcess (the default) or
	// QUICMesh.
	Network Network
}

// Network is how an embedded cluster's nodes reach each other.
type Network int

const (
	// InProcess hands messages between the nodes' inboxes in memory
	// (node.LocalNet): the nodes share one process and fail together, so
	// loopback QUIC between them would cost CPU (packets, encryption,
	// syscalls; most of the embedded log's cost under load) and buy
	// nothing. The default.
	InProcess Network = iota
	// QUICMesh runs every node's links over loopback QUIC with mutual TLS
	// (mesh.Group), as separate logd processes do: for measuring that path
	// in one process.
	QUICMesh
)

// network is a cmdlog.Network that can be closed.
type network interface {
	cmdlog.Network
	Close()
}

// localNet is node.LocalNet with nothing to close.
type localNet struct{ *node.LocalNet }

func (localNet) Close() {}

// Cluster is a command log cluster in this process.
type Cluster struct {
	lc      *cmdlog.LocalCluster
	coord   coord.Coordinator
	nats    *natscoord.Embedded
	closeNC func()
	log     *cmdlog.Client // players' commands
	world   *cmdlog.Client // the world: tick markers, migrations, reads
	group   network
	disk    *cmdlog.DiskStorage
	health  node.StorageHealth
}

// Start starts a cluster on o.Dir. Its goroutines (nodes, clients, the
// network, the coordinator's NATS) carry the pprof label component=log,
// so that a profile of a game server splits the log's CPU from the rest.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	pprof.Do(ctx, pprof.Labels("component", "log"), func(ctx context.Context) { c, err = start(ctx, o) })
	return c, err
}

func start(ctx context.Context, o Options) (*Cluster, error) {
	quiet := o.Logger
	if quiet == nil {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	server, client, err := ca.MutualTLS("localhost")
	if err != nil {
		return nil, err
	}
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: filepath.Join(o.Dir, "coord"), Host: "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	co, closeNC, err := natscoord.Dial(ctx, ns.ClientURL(), "embedded")
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	var net network = localNet{node.NewLocalNet()}
	if o.Network == QUICMesh {
		net = mesh.NewGroup(server, client, quiet)
	}
	c := &Cluster{coord: co, nats: ns, closeNC: closeNC, group: net, disk: &cmdlog.DiskStorage{Dir: o.Dir, Logger: quiet}}
	durability := o.Durability
	c.lc, err = cmdlog.StartLocal(ctx, cmdlog.LocalConfig{
		Coordinator: c.coord, Network: c.group, Durability: durability, Logger: quiet,
		Timing: node.Timing{Tick: 5 * time.Millisecond}, Core: seq.Config{SuspectTicks: 60},
		NewStorage: c.disk.NewStorage, NewWAL: c.disk.NewWAL, Health: &c.health,
	})
	if err != nil {
		c.group.Close()
		c.disk.Close()
		closeNC()
		ns.Shutdown()
		return nil, err
	}
	c.log = c.lc.NewClient(cmdlog.ClientConfig{OnAppendLatency: o.OnAppendLatency})
	c.world = c.lc.NewClient(cmdlog.ClientConfig{})
	return c, nil
}

// Log is the client for players' commands; World is the world's own
// client (tick markers, migrations, the runners' reads), so that under a
// flood of commands the world's markers do not wait behind them (a client
// keeps a bounded number of append rounds in flight).
func (c *Cluster) Log() *cmdlog.Client   { return c.log }
func (c *Cluster) World() *cmdlog.Client { return c.world }

// Local returns the cluster's nodes (to stop and restart them).
func (c *Cluster) Local() *cmdlog.LocalCluster { return c.lc }

// Coordinator returns the cluster's view coordinator.
func (c *Cluster) Coordinator() coord.Coordinator { return c.coord }

// Close stops the cluster.
func (c *Cluster) Close() {
	c.log.Close()
	c.world.Close()
	c.lc.Close()
	c.group.Close()
	c.disk.Close()
	c.closeNC()
	c.nats.Shutdown()
}

// Storing returns nil while every node of the cluster can store, else why
// not (e.g. "the command log cannot store (seq 2's WAL: ...: no space left
// on device)"). The nodes retry with backoff, so it clears by itself once
// the disk can store again; meanwhile no append completes.
func (c *Cluster) Storing() error { return c.health.Err() }

// CheckRestartable refuses to restart an embedded log that ran in memory
// durability: its sequencing replicas kept their state in memory only
// (that is what an acknowledgement meant), so when the whole process
// stops, the cluster cannot resume; the shards' ordered records remain but
// no replica can vouch for the rest. With fsync the replicas' write-ahead
// logs let it resume. The mode of a data directory is kept in a file, so
// the mode of a directory cannot change.
func CheckRestartable(dataDir string, d seq.Durability) error {
	mode := "memory"
	if d == seq.Fsync {
		mode = "fsync"
	}
	marker := filepath.Join(dataDir, "log-durability")
	prev, err := os.ReadFile(marker)
	switch {
	case os.IsNotExist(err):
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(marker, []byte(mode+"\n"), 0o644)
	case err != nil:
		return err
	}
	if p := strings.TrimSpace(string(prev)); p != "fsync" {
		return fmt.Errorf("%s holds an embedded command log that ran in %s durability: its sequencing replicas' state was lost when the process stopped, so it cannot resume (that is what a 'replicated' acknowledgement allows); to start a new match, remove %s or give another --data; --durability fsync (the default) can restart on its data", dataDir, p, dataDir)
	}
	if d != seq.Fsync {
		return fmt.Errorf("%s holds an embedded command log in fsync durability: restart it with --durability fsync (the default), or start a new match with another --data", dataDir)
	}
	return nil
}
