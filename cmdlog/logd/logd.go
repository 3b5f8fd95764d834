// Package logd runs one node of a command log cluster as its own process:
// a sequencing replica or a shard, on its QUIC mesh, with its view
// coordinator in NATS (optionally a nats-server inside the node) and its
// storage (a write-ahead log, or a shard store in Pebble or JetStream).
// 'broadside logd' is its command line.
package logd

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/cmdlog/shardstore/jsstore"
	"github.com/anoptic/broadside/cmdlog/wal"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
)

// Role is what a node does in the cluster.
type Role string

const (
	// Seq is a sequencing replica (ids below cmdlog.FirstShardID).
	Seq Role = "seq"
	// Shard stores ordered entries (ids from cmdlog.FirstShardID).
	Shard Role = "shard"
)

// Shard stores (Options.ShardStore).
const (
	// StorePebble keeps a shard's entries in Pebble under the data
	// directory.
	StorePebble = "pebble"
	// StoreJetStream keeps them in a JetStream stream on the
	// coordinator's NATS servers.
	StoreJetStream = "jetstream"
)

// Options configure a node.
type Options struct {
	Role Role
	ID   msg.NodeID
	// Peers maps every node of the cluster (this one included) to its UDP
	// address; StripeUnit is the cluster's stripe unit.
	Peers      map[msg.NodeID]string
	StripeUnit uint64
	// Listen is the UDP address to listen on (default: Peers[ID]).
	Listen string
	// DataDir holds the write-ahead log or the shard store, the QUIC
	// stateless-reset key and an embedded nats-server's data (required).
	DataDir string
	// ServerTLS and ClientTLS are the node's mesh identity.
	ServerTLS, ClientTLS *tls.Config
	// CoordURL is the view coordinator's NATS URL; EmbeddedNATS, if set,
	// starts a nats-server on that HOST:PORT inside the node and uses it.
	CoordURL, EmbeddedNATS string
	// ClusterName names the cluster's coordinator bucket and shard
	// streams; CoordReplicas is the bucket's replicas when this node
	// creates it.
	ClusterName   string
	CoordReplicas int
	// NATS are the credentials and TLS of every NATS connection; an
	// embedded nats-server demands them of its clients.
	NATS natscoord.ConnOptions
	// NoCrashDetect turns off a sequencing replica's crash detection
	// (mesh.Config.CrashDetect: TCP at the node's UDP port number, so
	// that a peer's SIGKILL is seen in a round trip rather than after
	// SuspectTicks). Firewalls must pass that TCP port, or peers fall
	// back to the silence timeout.
	NoCrashDetect bool
	// MaxClients caps the log clients a sequencing replica keeps dedup
	// marks for (seq.Config.MaxClients; 0: the default, 4,096). Every
	// player session of a game server is one.
	MaxClients int
	// Durability, SuspectTicks and Tick configure a sequencing replica.
	Durability   seq.Durability
	SuspectTicks int
	Tick         time.Duration
	// ShardStore is StorePebble (default) or StoreJetStream;
	// ShardReplicas is the stream's replicas when this node creates it.
	ShardStore    string
	ShardReplicas int
	// Registry receives the node's metrics (nil: none kept).
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// Run runs the node until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if _, ok := o.Peers[o.ID]; !ok {
		return fmt.Errorf("node %d is not in the peers", o.ID)
	}
	if o.Listen == "" {
		o.Listen = o.Peers[o.ID]
	}
	if o.DataDir == "" {
		return fmt.Errorf("a data directory is required")
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return err
	}
	log := o.Logger
	if o.EmbeddedNATS != "" {
		ns, err := StartEmbeddedNATS(o.EmbeddedNATS, filepath.Join(o.DataDir, "nats"), o.NATS)
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		o.CoordURL = ns.ClientURL()
		log.Info("embedded nats-server", "url", o.CoordURL)
	}
	if o.CoordURL == "" {
		return fmt.Errorf("a coordinator (nats://HOST:PORT) is required, or an embedded nats-server")
	}
	co, closeCoord, err := natscoord.DialConfig(ctx, o.CoordURL,
		natscoord.Config{Cluster: o.ClusterName, Replicas: o.CoordReplicas}, o.NATS)
	if err != nil {
		return err
	}
	defer closeCoord()

	inbox := node.NewInbox()
	// A node answers its previous life's connections with a stateless
	// reset (the key stays in its data directory), so peers notice a
	// restart at once instead of at their idle timeout.
	resetKey, err := mesh.LoadOrCreateResetKey(filepath.Join(o.DataDir, "quic-reset-key"))
	if err != nil {
		return err
	}
	m, err := mesh.New(mesh.Config{Self: o.ID, ListenAddr: o.Listen, Peers: o.Peers, ServerTLS: o.ServerTLS, ClientTLS: o.ClientTLS,
		Inbox: inbox, Logger: log, StatelessResetKey: resetKey, RequireIdentity: true,
		CrashDetect: o.Role == Seq && !o.NoCrashDetect})
	if err != nil {
		return err
	}
	defer m.Close()
	registerMeshMetrics(o.Registry, m, inbox)
	n := nodeEnv{o: o, layout: cmdlog.LayoutOf(o.Peers, o.StripeUnit), replicas: replicaIDs(o.Peers), mesh: m, inbox: inbox}
	log.Info("logd listening", "role", o.Role, "addr", m.Addr(), "shards", n.layout.Shards, "stripe_unit", n.layout.StripeUnit)
	switch o.Role {
	case Seq:
		return n.runSeq(ctx, co)
	case Shard:
		return n.runShard(ctx)
	default:
		return fmt.Errorf("the role must be %s or %s, not %q", Seq, Shard, o.Role)
	}
}

// replicaIDs returns the sequencing replicas among peers, in id order.
func replicaIDs(peers map[msg.NodeID]string) []msg.NodeID {
	var ids []msg.NodeID
	for id := range peers {
		if id < cmdlog.FirstShardID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// StartEmbeddedNATS starts a nats-server on hostPort with its data in
// storeDir. It demands of clients the credentials c connects with (user
// and password, or an nkey), over TLS with c's certificate when given;
// beyond loopback it refuses to start without credentials.
func StartEmbeddedNATS(hostPort, storeDir string, c natscoord.ConnOptions) (*natscoord.Embedded, error) {
	h, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: port %q: %w", p, err)
	}
	auth := natscoord.ServerAuth{User: c.User, Password: c.Password}
	if c.NkeySeedFile != "" {
		seed, err := os.ReadFile(c.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: %w", err)
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: nkey seed %s: %w", c.NkeySeedFile, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: nkey seed %s: %w", c.NkeySeedFile, err)
		}
		auth.Nkeys = []string{pub}
	}
	if c.CertFile != "" && c.KeyFile != "" {
		if auth.TLS, err = transport.ServerTLS(c.CertFile, c.KeyFile); err != nil {
			return nil, fmt.Errorf("embedded nats-server: %w", err)
		}
	}
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: storeDir, Host: h, Port: port, Auth: auth})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	return ns, nil
}

// nodeEnv is what a node runs on, whatever its role.
type nodeEnv struct {
	o        Options
	layout   msg.Layout
	replicas []msg.NodeID
	mesh     *mesh.Mesh
	inbox    node.Inbox
}

// runSeq runs a sequencing replica, bootstrapping the cluster's first
// view with the replicas if there is none yet.
func (n nodeEnv) runSeq(ctx context.Context, co coord.Coordinator) error {
	if _, err := cmdlog.Bootstrap(ctx, co, n.replicas); err != nil {
		return err
	}
	w, err := wal.Open(filepath.Join(n.o.DataDir, "wal"), wal.Options{Logger: n.o.Logger})
	if err != nil {
		return err
	}
	defer w.Close()
	metrics := node.NewSeqMetrics(n.o.Registry)
	return node.RunSeq(ctx, node.SeqConfig{
		Core:        seq.Config{ID: n.o.ID, Layout: n.layout, Replicas: n.replicas, Durability: n.o.Durability, SuspectTicks: n.o.SuspectTicks, MaxClients: n.o.MaxClients},
		Timing:      node.Timing{Tick: n.o.Tick},
		Coordinator: co, WAL: w, Transport: n.mesh, Inbox: n.inbox, Logger: n.o.Logger,
		Observe: metrics.Observe,
	})
}

// runShard runs a shard on its store.
func (n nodeEnv) runShard(ctx context.Context) error {
	if n.o.ID < cmdlog.FirstShardID {
		return fmt.Errorf("shard ids start at %d", cmdlog.FirstShardID)
	}
	var st shard.Storage
	switch n.o.ShardStore {
	case StorePebble, "":
		p, err := shardstore.Open(filepath.Join(n.o.DataDir, "shard"), shardstore.Options{Logger: n.o.Logger})
		if err != nil {
			return err
		}
		defer p.Close()
		st = p
	case StoreJetStream:
		js, closeJS, err := n.openShardStream(ctx)
		if err != nil {
			return err
		}
		defer closeJS()
		st = js
	default:
		return fmt.Errorf("the shard store must be %s or %s, not %q", StorePebble, StoreJetStream, n.o.ShardStore)
	}
	metrics := node.NewShardMetrics(n.o.Registry)
	return node.RunShard(ctx, node.ShardConfig{
		Core: shard.Config{ID: n.o.ID, Layout: n.layout, Replicas: n.replicas}, Storage: st, Transport: n.mesh, Inbox: n.inbox, Logger: n.o.Logger,
		Observe: metrics.Observe,
	})
}

// ShardStreamName is the JetStream stream of shard id of cluster: letters,
// digits, '-' and '_' only.
func ShardStreamName(cluster string, id msg.NodeID) string {
	clean := []byte(cluster)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			clean[i] = '_'
		}
	}
	return fmt.Sprintf("broadside-%s-shard-%d", clean, id)
}

// openShardStream opens the shard's store on a JetStream stream of the
// coordinator's NATS servers, on a connection of its own. The returned
// func closes the store and the connection.
func (n nodeEnv) openShardStream(ctx context.Context) (*jsstore.Store, func(), error) {
	connOpts := n.o.NATS
	connOpts.Name = fmt.Sprintf("broadside-shard-%d", n.o.ID)
	nc, err := natscoord.Connect(n.o.CoordURL, connOpts)
	if err != nil {
		return nil, nil, fmt.Errorf("shard store: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("shard store: %w", err)
	}
	name := ShardStreamName(n.o.ClusterName, n.o.ID)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := jsstore.Open(octx, js, jsstore.Options{Stream: name, Replicas: n.o.ShardReplicas, Logger: n.o.Logger})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("shard store (R%d; a single NATS server needs 1 replica): %w", n.o.ShardReplicas, err)
	}
	n.o.Logger.Info("shard store on JetStream", "stream", name, "replicas", n.o.ShardReplicas)
	return st, func() { st.Close(); nc.Close() }, nil
}

// registerMeshMetrics exports the refusals of the node's links: peers
// whose certificate does not prove their claimed id, clients that sent
// what a client may not, and messages the full inbox dropped.
func registerMeshMetrics(reg prometheus.Registerer, m *mesh.Mesh, in node.Inbox) {
	counter := func(name, help string, f func() uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "mesh", Name: name, Help: help},
			func() float64 { return float64(f()) }))
	}
	counter("identity_rejects_total", "Links closed because the peer's certificate does not prove the node id it claimed (CodeBadIdentity).", m.IdentityRejects)
	counter("forbidden_total", "Client links closed for a message a client may not send (a node's message, or a Trim without broadside:perm:trim).", m.Forbidden)
	counter("peer_gone_total", "Liveness connections to sequencing replicas that their side closed (a process ended), each reported to the node as msg.PeerGone.", m.PeerGoneReports)
	counter("inbox_dropped_total", "Inbound messages dropped because the node's inbox was full (messages or bytes).", in.Dropped)
}
