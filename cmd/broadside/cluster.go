package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
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
	// nats are the credentials and TLS of every NATS connection.
	nats natsFlags
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
	fs.DurationVar(&f.tick, prefix+"tick", 5*time.Millisecond, "protocol tick (heartbeats every 2 ticks; a silent peer is suspected after 60 ticks, logd --suspect-ticks)")
	f.nats.register(fs, prefix)
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

// nodeTLS returns the server and client TLS configs of node id (mutual
// TLS against the cluster's CA). With --tls-dir the node issues itself a
// certificate naming its id and role (broadside:node:<id>), and makes
// sure the directory holds the clients' certificate (client.pem); with
// --ca/--cert/--key the certificate must carry those URIs itself, as the
// node refuses peers whose certificates do not prove their ids.
func (f *clusterFlags) nodeTLS(id msg.NodeID, names ...string) (server, client *tls.Config, err error) {
	switch {
	case f.tlsDir != "":
		ca, err := transport.LoadOrCreateDevCA(f.tlsDir)
		if err != nil {
			return nil, nil, err
		}
		if err := mesh.EnsureDevClientCert(f.tlsDir, ca); err != nil {
			return nil, nil, err
		}
		return mesh.DevNodeTLS(ca, id, names...)
	case f.caFile != "" && f.certFile != "" && f.keyFile != "":
		return f.fileTLS()
	}
	return nil, nil, fmt.Errorf("TLS: give --tls-dir DIR (development CA) or --ca, --cert and --key")
}

// clientTLS returns a log client's TLS config. With --tls-dir it loads the
// clients' certificate a node issued there (client.pem), never the CA key.
func (f *clusterFlags) clientTLS() (*tls.Config, error) {
	switch {
	case f.tlsDir != "":
		return mesh.LoadDevClientTLS(f.tlsDir)
	case f.caFile != "" && f.certFile != "" && f.keyFile != "":
		_, cli, err := f.fileTLS()
		return cli, err
	}
	return nil, fmt.Errorf("TLS: give --tls-dir DIR (development CA) or --ca, --cert and --key")
}

// fileTLS returns the mutual TLS configs of --ca, --cert and --key.
func (f *clusterFlags) fileTLS() (server, client *tls.Config, err error) {
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

// openCoordinator connects to the NATS coordinator with the --nats-*
// credentials and TLS. The returned func closes the connection.
func (f *clusterFlags) openCoordinator(ctx context.Context) (coord.Coordinator, func(), error) {
	if f.coordURL == "" {
		return nil, nil, fmt.Errorf("--coord nats://HOST:PORT is required (or run a node with --embedded-nats)")
	}
	o, err := f.nats.connOptions()
	if err != nil {
		return nil, nil, err
	}
	c, closeFn, err := natscoord.DialConfig(ctx, f.coordURL, natscoord.Config{Cluster: f.clusterName}, o)
	if err != nil {
		return nil, nil, err
	}
	return c, closeFn, nil
}

// dialCluster starts a client of a cluster described by the flags.
func (f *clusterFlags) dialCluster(ctx context.Context, cc cmdlog.ClientConfig) (*cmdlog.RemoteClient, func(), error) {
	peers, err := parsePeers(f.peers)
	if err != nil {
		return nil, nil, err
	}
	client, err := f.clientTLS()
	if err != nil {
		return nil, nil, err
	}
	co, closeCoord, err := f.openCoordinator(ctx)
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
