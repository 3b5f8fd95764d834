package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/spf13/pflag"
)

// clusterFlags are the flags shared by every command that talks to a log
// cluster of separate processes.
type clusterFlags struct {
	peers       string
	stripeUnit  uint64
	coordURL    string
	clusterName string
	tlsDir      string
	caFile      string
	certFile    string
	keyFile     string
	tick        time.Duration
}

func (f *clusterFlags) register(fs *pflag.FlagSet) { f.registerPrefixed(fs, "") }

// registerPrefixed registers the flags with a name prefix (for commands
// that have flags of the same names for another purpose).
func (f *clusterFlags) registerPrefixed(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&f.peers, prefix+"peers", "", "every sequencing replica and shard as ID=HOST:PORT, comma separated (replicas 1.., shards 101..)")
	fs.Uint64Var(&f.stripeUnit, prefix+"stripe-unit", 256, "consecutive positions per shard run (must match across the cluster)")
	fs.StringVar(&f.coordURL, prefix+"coord", "", "view coordinator: nats://HOST:PORT (NATS JetStream KV)")
	fs.StringVar(&f.clusterName, prefix+"cluster-name", "broadside", "cluster name (key of the view record)")
	fs.StringVar(&f.tlsDir, prefix+"tls-dir", "", "development CA directory: created if missing, every node and client of the cluster must share it")
	fs.StringVar(&f.caFile, prefix+"ca", "", "production: CA certificate file that signs every node's certificate")
	fs.StringVar(&f.certFile, prefix+"cert", "", "production: this node's certificate file")
	fs.StringVar(&f.keyFile, prefix+"key", "", "production: this node's private key file")
	fs.DurationVar(&f.tick, prefix+"tick", 5*time.Millisecond, "protocol tick (heartbeats every 2 ticks, failure suspected after 20)")
}

// parsePeers parses "1=127.0.0.1:7001,101=127.0.0.1:7101".
func parsePeers(s string) (map[msg.NodeID]string, error) {
	peers := map[msg.NodeID]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--peers: %q is not ID=HOST:PORT", part)
		}
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || n == 0 || n >= 1<<24 {
			return nil, fmt.Errorf("--peers: bad node id %q (1..16777215)", id)
		}
		peers[msg.NodeID(n)] = addr
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("--peers is required (for example 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102)")
	}
	return peers, nil
}

func replicaIDs(peers map[msg.NodeID]string) []msg.NodeID {
	var ids []msg.NodeID
	for id := range peers {
		if id < cmdlog.FirstShardID {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// tlsConfigs returns the server and client TLS configs of a node (mutual
// TLS against the cluster's CA).
func (f *clusterFlags) tlsConfigs(names ...string) (server, client *tls.Config, err error) {
	switch {
	case f.tlsDir != "":
		ca, err := transport.LoadOrCreateDevCA(f.tlsDir)
		if err != nil {
			return nil, nil, err
		}
		return ca.MutualTLS(names...)
	case f.caFile != "" && f.certFile != "" && f.keyFile != "":
		pool, err := transport.LoadCertPool(f.caFile)
		if err != nil {
			return nil, nil, err
		}
		srv, err := transport.ServerTLS(f.certFile, f.keyFile)
		if err != nil {
			return nil, nil, err
		}
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("load %s: %w", f.certFile, err)
		}
		cli, err := transport.ClientTLS(f.caFile)
		if err != nil {
			return nil, nil, err
		}
		return transport.RequireClientCerts(srv, pool), transport.WithClientCert(cli, cert), nil
	}
	return nil, nil, fmt.Errorf("TLS: give --tls-dir DIR (development CA) or --ca, --cert and --key")
}

// openCoordinator connects to the NATS coordinator. The returned func
// closes the connection.
func openCoordinator(ctx context.Context, url, cluster string) (coord.Coordinator, func(), error) {
	if url == "" {
		return nil, nil, fmt.Errorf("--coord nats://HOST:PORT is required (or run a node with --embedded-nats)")
	}
	return natscoord.Dial(ctx, url, cluster)
}

// dialCluster starts a client of a cluster described by the flags.
func (f *clusterFlags) dialCluster(ctx context.Context, cc cmdlog.ClientConfig) (*cmdlog.RemoteClient, func(), error) {
	peers, err := parsePeers(f.peers)
	if err != nil {
		return nil, nil, err
	}
	_, client, err := f.tlsConfigs()
	if err != nil {
		return nil, nil, err
	}
	co, closeCoord, err := openCoordinator(ctx, f.coordURL, f.clusterName)
	if err != nil {
		return nil, nil, err
	}
	rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: peers, StripeUnit: f.stripeUnit, Coordinator: co,
		ClientTLS: client, Client: cc, Logger: quietLogger()})
	if err != nil {
		closeCoord()
		return nil, nil, err
	}
	return rc, func() { rc.Close(); closeCoord() }, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// durabilityUsage is the help of every --durability flag.
const durabilityUsage = "when a sequencing replica acknowledges: fsync (after syncing its write-ahead log: acknowledged 'durable') or memory (in memory on every replica of the view: acknowledged 'replicated', lost if every replica dies)"

// parseDurability reads a --durability flag.
func parseDurability(s string) (seq.Durability, error) {
	switch s {
	case "fsync":
		return seq.Fsync, nil
	case "memory":
		return seq.Memory, nil
	}
	return 0, fmt.Errorf("--durability must be fsync or memory, not %q", s)
}

// announceDurability says at start-up what an acknowledgement promises.
func announceDurability(w io.Writer, d seq.Durability) {
	if d == seq.Fsync {
		fmt.Fprintln(w, "durability fsync: a command is acknowledged 'durable' once every sequencing replica has synced it to its write-ahead log; it survives a crash of the whole process")
		return
	}
	fmt.Fprintln(w, "durability memory (opt-in): a command is acknowledged 'replicated' once it is in memory on every sequencing replica; a crash of every replica (with the embedded log: of this process) loses it, and the data directory cannot resume")
}
