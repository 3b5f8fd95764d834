package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// logdFlags are the flags of 'broadside logd'.
type logdFlags struct {
	cf           clusterFlags
	role         string
	id           uint32
	listen       string
	dataDir      string
	durability   string
	embeddedNATS string
	metricsAddr  string
	suspect      int
	shardStore   string
	shardReps    int
	coordReps    int
}

// natsFlags are the credentials and TLS of a node's NATS connections (the
// view coordinator and, with --shard-store jetstream, the shard's stream).
type natsFlags struct {
	user, passwordFile, nkeyFile, credsFile string
	caFile, certFile, keyFile               string
}

func (n *natsFlags) register(f *pflag.FlagSet, prefix string) {
	f.StringVar(&n.user, prefix+"nats-user", "", "NATS user name (with --nats-password-file)")
	f.StringVar(&n.passwordFile, prefix+"nats-password-file", "", "file holding the NATS user's password")
	f.StringVar(&n.nkeyFile, prefix+"nats-nkey", "", "file holding a NATS user nkey seed (SU...), for nkey authentication")
	f.StringVar(&n.credsFile, prefix+"nats-creds", "", "NATS credentials file (user JWT and seed; decentralised auth)")
	f.StringVar(&n.caFile, prefix+"nats-ca", "", "CA certificate of the NATS servers: connect over TLS and verify them against it")
	f.StringVar(&n.certFile, prefix+"nats-cert", "", "client certificate for NATS servers that verify clients (with --nats-key)")
	f.StringVar(&n.keyFile, prefix+"nats-key", "", "private key of --nats-cert")
}

// connOptions returns the natscoord options the flags describe.
func (n *natsFlags) connOptions() (natscoord.ConnOptions, error) {
	o := natscoord.ConnOptions{User: n.user, NkeySeedFile: n.nkeyFile, CredsFile: n.credsFile,
		CAFile: n.caFile, CertFile: n.certFile, KeyFile: n.keyFile}
	if n.passwordFile != "" {
		if n.user == "" {
			return o, fmt.Errorf("--nats-password-file needs --nats-user")
		}
		b, err := os.ReadFile(n.passwordFile)
		if err != nil {
			return o, fmt.Errorf("--nats-password-file: %w", err)
		}
		o.Password = strings.TrimRight(string(b), "\r\n")
	}
	return o, nil
}

func newLogdCmd() *cobra.Command {
	var o logdFlags
	cmd := &cobra.Command{
		Use:   "logd",
		Short: "Run one node of a command log cluster (a sequencing replica or a shard)",
		Long: `Run one node of a Broadside command log cluster.

A cluster has sequencing replicas (ids 1, 2, 3, ...) and shards (ids 101, 102,
...). Every node gets the same --peers list and coordinator. Appends are durable
once every sequencing replica of the current view holds them; the view's leader
orders them into the shards in the background.

Durability of the sequencing replicas (--durability):
  fsync   (the default) acknowledged only after the replica's write-ahead log
          (Pebble, under --data) is synced: an acknowledgement says 'durable'
          and the append survives the crash of every replica.
  memory  (opt-in) acknowledged once in memory on every replica of the view
          (as in the LazyLog paper): an acknowledgement says 'replicated';
          the append survives as long as one replica of that view survives.
Shards always make their writes durable before acknowledging the leader.
Where a shard keeps them (--shard-store):
  pebble     (the default) a Pebble store under --data, synced: losing the
             node's disk loses the shard's stripes.
  jetstream  a JetStream stream (broadside-CLUSTER-shard-ID) on the NATS
             servers of --coord, with --shard-replicas replicas (3: give
             --coord a 3-node cluster whose servers run with
             'sync_interval: always'); nothing is kept under --data, so the
             node or its disk can be lost. See docs/nats.md.

The view coordinator is NATS JetStream KV (--coord nats://...). For one
machine, --embedded-nats HOST:PORT starts a nats-server inside this node (its
data under --data/nats) that the other nodes use as --coord. The --nats-*
flags give credentials (user and password, an nkey, or a creds file) and TLS
for every NATS connection of the node.`,
		Example: `  # a 3-replica, 2-shard cluster on one machine (five terminals):
  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside logd --role seq --id 1 --peers $P --data /tmp/bs/1 --tls-dir /tmp/bs/tls --embedded-nats 127.0.0.1:4222
  broadside logd --role seq --id 2 --peers $P --data /tmp/bs/2 --tls-dir /tmp/bs/tls --coord nats://127.0.0.1:4222
  broadside logd --role seq --id 3 --peers $P --data /tmp/bs/3 --tls-dir /tmp/bs/tls --coord nats://127.0.0.1:4222
  broadside logd --role shard --id 101 --peers $P --data /tmp/bs/101 --tls-dir /tmp/bs/tls --coord nats://127.0.0.1:4222
  broadside logd --role shard --id 102 --peers $P --data /tmp/bs/102 --tls-dir /tmp/bs/tls --coord nats://127.0.0.1:4222`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runLogd(ctx, o)
		},
	}
	f := cmd.Flags()
	o.cf.register(f)
	f.StringVar(&o.role, "role", "", "seq (sequencing replica) or shard")
	f.Uint32Var(&o.id, "id", 0, "this node's id (its entry in --peers)")
	f.StringVar(&o.listen, "listen", "", "UDP address to listen on (default: this node's --peers address)")
	f.StringVar(&o.dataDir, "data", "", "data directory (write-ahead log or shard store)")
	f.StringVar(&o.durability, "durability", "fsync", durabilityUsage)
	f.StringVar(&o.embeddedNATS, "embedded-nats", "", "start a nats-server in this process on HOST:PORT and use it as the coordinator")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /debug/pprof on this address")
	f.IntVar(&o.suspect, "suspect-ticks", 20, "ticks of silence before a peer is considered failed")
	f.StringVar(&o.shardStore, "shard-store", "pebble", "where a shard keeps its entries: pebble (local, under --data) or jetstream (a NATS JetStream stream)")
	f.IntVar(&o.shardReps, "shard-replicas", 3, "replicas of the shard's JetStream stream when this node creates it (--shard-store jetstream)")
	f.IntVar(&o.coordReps, "coord-replicas", 1, "replicas of the view coordinator's KV bucket when this node creates it (3 on a NATS cluster)")
	cmd.MarkFlagRequired("role")
	cmd.MarkFlagRequired("id")
	return cmd
}

// runLogd runs one node until ctx ends: its QUIC mesh, the coordinator
// (and the embedded nats-server if asked for), metrics, and the
// sequencing replica or the shard.
func runLogd(ctx context.Context, o logdFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.id)
	peers, err := parsePeers(o.cf.peers)
	if err != nil {
		return err
	}
	self := msg.NodeID(o.id)
	if _, ok := peers[self]; !ok {
		return fmt.Errorf("--id %d is not in --peers", o.id)
	}
	if o.listen == "" {
		o.listen = peers[self]
	}
	if o.dataDir == "" {
		return fmt.Errorf("--data DIR is required")
	}
	if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(o.listen)
	server, client, err := o.cf.nodeTLS(self, host)
	if err != nil {
		return err
	}
	connOpts, err := o.cf.nats.connOptions()
	if err != nil {
		return err
	}
	if o.embeddedNATS != "" {
		ns, err := startEmbeddedNATS(o.embeddedNATS, o.dataDir, connOpts)
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		o.cf.coordURL = ns.ClientURL()
		log.Info("embedded nats-server", "url", o.cf.coordURL)
	}
	if o.cf.coordURL == "" {
		return fmt.Errorf("--coord nats://HOST:PORT is required (or run a node with --embedded-nats)")
	}
	co, closeCoord, err := natscoord.DialConfig(ctx, o.cf.coordURL,
		natscoord.Config{Cluster: o.cf.clusterName, Replicas: o.coordReps}, connOpts)
	if err != nil {
		return err
	}
	defer closeCoord()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	serveAdmin(ctx, o.metricsAddr, reg, log, nil)

	inbox := node.NewInbox()
	// A node answers its previous life's connections with a stateless
	// reset (the key stays in its data directory), so peers notice a
	// restart at once instead of at their idle timeout.
	resetKey, err := mesh.LoadOrCreateResetKey(filepath.Join(o.dataDir, "quic-reset-key"))
	if err != nil {
		return err
	}
	m, err := mesh.New(mesh.Config{Self: self, ListenAddr: o.listen, Peers: peers, ServerTLS: server, ClientTLS: client, Inbox: inbox, Logger: log,
		StatelessResetKey: resetKey, RequireIdentity: true})
	if err != nil {
		return err
	}
	defer m.Close()
	registerMeshMetrics(reg, m, inbox)
	n := logdNode{self: self, layout: cmdlog.LayoutOf(peers, o.cf.stripeUnit), replicas: replicaIDs(peers), mesh: m, inbox: inbox, reg: reg, log: log}
	log.Info("logd listening", "role", o.role, "addr", m.Addr(), "shards", n.layout.Shards, "stripe_unit", n.layout.StripeUnit)
	switch o.role {
	case "seq":
		return n.runSeq(ctx, o, co, n.replicas)
	case "shard":
		return n.runShard(ctx, o, connOpts)
	default:
		return fmt.Errorf("--role must be seq or shard, not %q", o.role)
	}
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
	counter("inbox_dropped_total", "Inbound messages dropped because the node's inbox was full (messages or bytes).", in.Dropped)
}

// startEmbeddedNATS starts a nats-server on hostPort with its data under
// dataDir/nats. It demands of clients the credentials the node itself
// connects with (--nats-user and --nats-password-file, or --nats-nkey),
// over TLS with --nats-cert and --nats-key as its certificate when given;
// beyond loopback it refuses to start without credentials.
func startEmbeddedNATS(hostPort, dataDir string, c natscoord.ConnOptions) (*natscoord.Embedded, error) {
	h, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, fmt.Errorf("--embedded-nats: %w", err)
	}
	port, _ := strconv.Atoi(p)
	auth := natscoord.ServerAuth{User: c.User, Password: c.Password}
	if c.NkeySeedFile != "" {
		seed, err := os.ReadFile(c.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("--embedded-nats: %w", err)
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return nil, fmt.Errorf("--embedded-nats: nkey seed %s: %w", c.NkeySeedFile, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("--embedded-nats: nkey seed %s: %w", c.NkeySeedFile, err)
		}
		auth.Nkeys = []string{pub}
	}
	if c.CertFile != "" && c.KeyFile != "" {
		if auth.TLS, err = transport.ServerTLS(c.CertFile, c.KeyFile); err != nil {
			return nil, fmt.Errorf("--embedded-nats: %w", err)
		}
	}
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: filepath.Join(dataDir, "nats"), Host: h, Port: port, Auth: auth})
	if err != nil {
		return nil, fmt.Errorf("--embedded-nats: %w", err)
	}
	return ns, nil
}

// logdNode is what a node runs on, whatever its role.
type logdNode struct {
	self     msg.NodeID
	layout   msg.Layout
	replicas []msg.NodeID
	mesh     *mesh.Mesh
	inbox    node.Inbox
	reg      *prometheus.Registry
	log      *slog.Logger
}

// runSeq runs a sequencing replica, bootstrapping the cluster's first
// view with replicas if there is none yet.
func (n logdNode) runSeq(ctx context.Context, o logdFlags, co coord.Coordinator, replicas []msg.NodeID) error {
	d, err := parseDurability(o.durability)
	if err != nil {
		return err
	}
	announceDurability(os.Stderr, d)
	if _, err := cmdlog.Bootstrap(ctx, co, replicas); err != nil {
		return err
	}
	w, err := wal.Open(filepath.Join(o.dataDir, "wal"), wal.Options{Logger: n.log})
	if err != nil {
		return err
	}
	defer w.Close()
	metrics := node.NewSeqMetrics(n.reg)
	return node.RunSeq(ctx, node.SeqConfig{
		Core:        seq.Config{ID: n.self, Layout: n.layout, Replicas: n.replicas, Durability: d, SuspectTicks: o.suspect},
		Timing:      node.Timing{Tick: o.cf.tick},
		Coordinator: co, WAL: w, Transport: n.mesh, Inbox: n.inbox, Logger: n.log,
		Observe: metrics.Observe,
	})
}

// runShard runs a shard on its store (--shard-store).
func (n logdNode) runShard(ctx context.Context, o logdFlags, connOpts natscoord.ConnOptions) error {
	if n.self < cmdlog.FirstShardID {
		return fmt.Errorf("shard ids start at %d", cmdlog.FirstShardID)
	}
	var st shard.Storage
	switch o.shardStore {
	case "pebble":
		p, err := shardstore.Open(filepath.Join(o.dataDir, "shard"), shardstore.Options{Logger: n.log})
		if err != nil {
			return err
		}
		defer p.Close()
		st = p
	case "jetstream":
		js, closeJS, err := openShardStream(ctx, o, n.self, connOpts, n.log)
		if err != nil {
			return err
		}
		defer closeJS()
		st = js
	default:
		return fmt.Errorf("--shard-store must be pebble or jetstream, not %q", o.shardStore)
	}
	metrics := node.NewShardMetrics(n.reg)
	return node.RunShard(ctx, node.ShardConfig{
		Core: shard.Config{ID: n.self, Layout: n.layout, Replicas: n.replicas}, Storage: st, Transport: n.mesh, Inbox: n.inbox, Logger: n.log,
		Observe: metrics.Observe,
	})
}

// shardStreamName is the JetStream stream of shard id of cluster: letters,
// digits, '-' and '_' only.
func shardStreamName(cluster string, id msg.NodeID) string {
	clean := []byte(cluster)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			clean[i] = '_'
		}
	}
	return fmt.Sprintf("broadside-%s-shard-%d", clean, id)
}

// openShardStream opens the shard's store on a JetStream stream of the
// NATS servers at --coord, on a connection of its own. The returned func
// closes the store and the connection.
func openShardStream(ctx context.Context, o logdFlags, id msg.NodeID, connOpts natscoord.ConnOptions, log *slog.Logger) (*jsstore.Store, func(), error) {
	connOpts.Name = fmt.Sprintf("broadside-shard-%d", id)
	nc, err := natscoord.Connect(o.cf.coordURL, connOpts)
	if err != nil {
		return nil, nil, fmt.Errorf("shard store: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("shard store: %w", err)
	}
	name := shardStreamName(o.cf.clusterName, id)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := jsstore.Open(octx, js, jsstore.Options{Stream: name, Replicas: o.shardReps, Logger: log})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("shard store (R%d; a single NATS server needs --shard-replicas 1): %w", o.shardReps, err)
	}
	log.Info("shard store on JetStream", "stream", name, "replicas", o.shardReps)
	return st, func() { st.Close(); nc.Close() }, nil
}
