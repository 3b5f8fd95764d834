package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/cmdlog/wal"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

func newLogdCmd() *cobra.Command {
	var (
		cf           clusterFlags
		role         string
		id           uint32
		listen       string
		dataDir      string
		durability   string
		embeddedNATS string
		metricsAddr  string
		suspect      int
	)
	cmd := &cobra.Command{
		Use:   "logd",
		Short: "Run one node of a command log cluster (a sequencing replica or a shard)",
		Long: `Run one node of a Broadside command log cluster.

A cluster has sequencing replicas (ids 1, 2, 3, ...) and shards (ids 101, 102,
...). Every node gets the same --peers list and coordinator. Appends are durable
once every sequencing replica of the current view holds them; the view's leader
orders them into the shards in the background.

Durability of the sequencing replicas (--durability):
  memory  acknowledged once in memory on every replica of the view (as in the
          LazyLog paper): an acknowledged append survives as long as one
          replica of that view survives.
  fsync   acknowledged only after the replica's write-ahead log (Pebble, under
          --data) is synced: it survives the crash of every replica.
Shards always sync their Pebble store before acknowledging the leader.

The view coordinator is NATS JetStream KV (--coord nats://...). For one
machine, --embedded-nats HOST:PORT starts a nats-server inside this node (its
data under --data/nats) that the other nodes use as --coord.`,
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
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", id)
			peers, err := parsePeers(cf.peers)
			if err != nil {
				return err
			}
			self := msg.NodeID(id)
			if _, ok := peers[self]; !ok {
				return fmt.Errorf("--id %d is not in --peers", id)
			}
			if listen == "" {
				listen = peers[self]
			}
			if dataDir == "" {
				return fmt.Errorf("--data DIR is required")
			}
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return err
			}
			host, _, _ := net.SplitHostPort(listen)
			server, client, err := cf.tlsConfigs(host)
			if err != nil {
				return err
			}
			if embeddedNATS != "" {
				h, p, err := net.SplitHostPort(embeddedNATS)
				if err != nil {
					return fmt.Errorf("--embedded-nats: %w", err)
				}
				port, _ := strconv.Atoi(p)
				ns, err := coord.StartEmbeddedNATS(coord.EmbeddedOptions{StoreDir: filepath.Join(dataDir, "nats"), Host: h, Port: port})
				if err != nil {
					return err
				}
				defer ns.Shutdown()
				cf.coordURL = ns.ClientURL()
				log.Info("embedded nats-server", "url", cf.coordURL)
			}
			co, closeCoord, err := openCoordinator(ctx, cf.coordURL, cf.clusterName)
			if err != nil {
				return err
			}
			defer closeCoord()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			serveAdmin(ctx, metricsAddr, reg, log, nil)

			inbox := node.NewInbox()
			resetKey, err := mesh.LoadOrCreateResetKey(filepath.Join(dataDir, "quic-reset-key"))
			if err != nil {
				return err
			}
			m, err := mesh.New(mesh.Config{Self: self, ListenAddr: listen, Peers: peers, ServerTLS: server, ClientTLS: client, Inbox: inbox, Logger: log,
				StatelessResetKey: resetKey})
			if err != nil {
				return err
			}
			defer m.Close()
			layout := cmdlog.LayoutOf(peers, cf.stripeUnit)
			timing := node.Timing{Tick: cf.tick}
			log.Info("logd listening", "role", role, "addr", m.Addr(), "shards", layout.Shards, "stripe_unit", layout.StripeUnit)
			switch role {
			case "seq":
				var d seq.Durability
				switch durability {
				case "memory":
					d = seq.Memory
				case "fsync":
					d = seq.Fsync
				default:
					return fmt.Errorf("--durability must be memory or fsync, not %q", durability)
				}
				if _, err := cmdlog.Bootstrap(ctx, co, replicaIDs(peers)); err != nil {
					return err
				}
				w, err := wal.Open(filepath.Join(dataDir, "wal"), wal.Options{Logger: log})
				if err != nil {
					return err
				}
				defer w.Close()
				metrics := node.NewSeqMetrics(reg)
				return node.RunSeq(ctx, node.SeqConfig{
					Core:        seq.Config{ID: self, Layout: layout, Durability: d, SuspectTicks: suspect},
					Timing:      timing,
					Coordinator: co, WAL: w, Transport: m, Inbox: inbox, Logger: log,
					Observe: metrics.Observe,
				})
			case "shard":
				if self < cmdlog.FirstShardID {
					return fmt.Errorf("shard ids start at %d", cmdlog.FirstShardID)
				}
				st, err := shardstore.Open(filepath.Join(dataDir, "shard"), shardstore.Options{Logger: log})
				if err != nil {
					return err
				}
				defer st.Close()
				metrics := node.NewShardMetrics(reg)
				return node.RunShard(ctx, node.ShardConfig{
					Core: shard.Config{ID: self, Layout: layout}, Storage: st, Transport: m, Inbox: inbox, Logger: log,
					Observe: metrics.Observe,
				})
			default:
				return fmt.Errorf("--role must be seq or shard, not %q", role)
			}
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&role, "role", "", "seq (sequencing replica) or shard")
	f.Uint32Var(&id, "id", 0, "this node's id (its entry in --peers)")
	f.StringVar(&listen, "listen", "", "UDP address to listen on (default: this node's --peers address)")
	f.StringVar(&dataDir, "data", "", "data directory (write-ahead log or shard store)")
	f.StringVar(&durability, "durability", "memory", "sequencing replicas: memory or fsync")
	f.StringVar(&embeddedNATS, "embedded-nats", "", "start a nats-server in this process on HOST:PORT and use it as the coordinator")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /debug/pprof on this address")
	f.IntVar(&suspect, "suspect-ticks", 20, "ticks of silence before a peer is considered failed")
	cmd.MarkFlagRequired("role")
	cmd.MarkFlagRequired("id")
	return cmd
}
