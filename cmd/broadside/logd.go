package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/logd"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// logdFlags are the flags of 'broadside logd'.
type logdFlags struct {
	cf            clusterFlags
	role          string
	id            uint32
	listen        string
	dataDir       string
	durability    string
	embeddedNATS  string
	metricsAddr   string
	suspect       int
	noCrashDetect bool
	maxClients    int
	shardStore    string
	shardReps     int
	coordReps     int
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
	f.IntVar(&o.suspect, "suspect-ticks", 60, "ticks of silence before a peer is considered failed (a crashed process is seen at once through the liveness connections; this covers a lost machine or path)")
	f.IntVar(&o.maxClients, "max-clients", 0, "log clients (each player session of a game server is one) whose dedup marks a sequencing replica keeps within their lease; a full table refuses a new one busy (0: 4096; at most 5825, what a view record holds)")
	f.BoolVar(&o.noCrashDetect, "no-crash-detect", false, "do not hold TCP liveness connections to the other sequencing replicas (on the TCP port numbered like each one's UDP port): a peer's crash is then noticed only after --suspect-ticks of silence")
	f.StringVar(&o.shardStore, "shard-store", "pebble", "where a shard keeps its entries: pebble (local, under --data) or jetstream (a NATS JetStream stream)")
	f.IntVar(&o.shardReps, "shard-replicas", 3, "replicas of the shard's JetStream stream when this node creates it (--shard-store jetstream)")
	f.IntVar(&o.coordReps, "coord-replicas", 1, "replicas of the view coordinator's KV bucket when this node creates it (3 on a NATS cluster)")
	cmd.MarkFlagRequired("role")
	cmd.MarkFlagRequired("id")
	return cmd
}

// runLogd runs one node until ctx ends: its metrics, and the node
// (logd.Run).
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
	if o.embeddedNATS == "" && o.cf.coordURL == "" {
		return fmt.Errorf("--coord nats://HOST:PORT is required (or run a node with --embedded-nats)")
	}
	d, err := parseDurability(o.durability)
	if err != nil {
		return err
	}
	if o.role == string(logd.Seq) {
		announceDurability(os.Stderr, d)
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	serveAdmin(ctx, o.metricsAddr, reg, log, nil)
	return logd.Run(ctx, logd.Options{
		Role: logd.Role(o.role), ID: self, Peers: peers, StripeUnit: o.cf.stripeUnit, Listen: o.listen, DataDir: o.dataDir,
		ServerTLS: server, ClientTLS: client, CoordURL: o.cf.coordURL, EmbeddedNATS: o.embeddedNATS,
		ClusterName: o.cf.clusterName, CoordReplicas: o.coordReps, NATS: connOpts,
		NoCrashDetect: o.noCrashDetect, MaxClients: o.maxClients, Durability: d, SuspectTicks: o.suspect, Tick: o.cf.tick, ShardStore: o.shardStore, ShardReplicas: o.shardReps,
		Registry: reg, Logger: log,
	})
}
