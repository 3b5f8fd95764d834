package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/netcode/transport"
)

// natsNodeFlags are the flags of 'broadside nats'.
type natsNodeFlags struct {
	name, listen, clusterListen, clusterName, routes, storeDir string
	user, passwordFile, routeUser, routePasswordFile           string
	tlsDir, tlsCert, tlsKey, sync                              string
}

func newNatsCmd() *cobra.Command {
	var f natsNodeFlags
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run one NATS server node (JetStream) of a Broadside cluster in its own process",
		Long: `Run one node of a NATS cluster with JetStream, embedded (nats-server as a
library): the coordinator, the leases, the snapshot store and the frames of a
world run on it. Three of them routed to each other make an R3 cluster that
survives the loss of one. Each keeps its JetStream store in --store-dir and
fsyncs every write (sync always); a node SIGKILLed and restarted on the same
directory catches up from the others.

Any standard nats-server cluster (2.10 or later, JetStream enabled, sync
always) serves as well: this command only saves installing one.`,
		Example: `  broadside nats --name n1 --listen 127.0.0.1:4222 --cluster-listen 127.0.0.1:6222 \
    --routes 127.0.0.1:6222,127.0.0.1:6223,127.0.0.1:6224 --store-dir /var/lib/broadside/nats \
    --user broadside --password-file nats.pw --tls-dir tls`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options()
			if err != nil {
				return err
			}
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			node, err := natscoord.StartNode(opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nats node %s listening on %s (cluster %q on %s, %d routes), JetStream in %s\n",
				opts.Name, node.ClientURL(), opts.ClusterName, f.clusterListen, len(opts.Routes), opts.StoreDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			node.Shutdown()
			fmt.Fprintf(cmd.OutOrStdout(), "nats node %s stopped\n", opts.Name)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "this node's name, unique in the cluster (required with --cluster-listen)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client address HOST:PORT")
	fl.StringVar(&f.clusterListen, "cluster-listen", "", "route address HOST:PORT for the other nodes (empty: a single node)")
	fl.StringVar(&f.clusterName, "cluster-name", "broadside", "NATS cluster name (the same on every node)")
	fl.StringVar(&f.routes, "routes", "", "every node's route address HOST:PORT, comma separated (this node's own is skipped)")
	fl.StringVar(&f.storeDir, "store-dir", "", "JetStream store directory (required; keep it across restarts)")
	fl.StringVar(&f.user, "user", "", "the user clients must authenticate as (with --password-file; required beyond loopback)")
	fl.StringVar(&f.passwordFile, "password-file", "", "file holding --user's password")
	fl.StringVar(&f.routeUser, "route-user", "", "user the nodes authenticate their routes with (required for routes beyond loopback)")
	fl.StringVar(&f.routePasswordFile, "route-password-file", "", "file holding --route-user's password")
	fl.StringVar(&f.tlsDir, "tls-dir", "", "development CA directory: serve clients over TLS with a certificate from it")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "production: serve clients over TLS with this certificate (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "private key of --tls-cert")
	fl.StringVar(&f.sync, "sync", "always", "when JetStream fsyncs: always (every write) or periodic (nats-server's default, every 2 minutes)")
	return cmd
}

// options turns the flags into natscoord.NodeOptions.
func (f natsNodeFlags) options() (natscoord.NodeOptions, error) {
	var o natscoord.NodeOptions
	host, port, err := splitHostPort(f.listen, "--listen")
	if err != nil {
		return o, err
	}
	if f.storeDir == "" {
		return o, fmt.Errorf("--store-dir is required")
	}
	o = natscoord.NodeOptions{Name: f.name, Host: host, Port: port, StoreDir: f.storeDir, ClusterName: f.clusterName}
	if f.clusterListen != "" {
		if o.ClusterHost, o.ClusterPort, err = splitHostPort(f.clusterListen, "--cluster-listen"); err != nil {
			return o, err
		}
		for _, r := range strings.Split(f.routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				o.Routes = append(o.Routes, r)
			}
		}
	}
	switch f.sync {
	case "always":
	case "periodic":
		o.Sync = natscoord.SyncPeriodic
	default:
		return o, fmt.Errorf("--sync must be always or periodic, not %q", f.sync)
	}
	if o.Auth.User = f.user; f.user != "" {
		if o.Auth.Password, err = readSecretLine(f.passwordFile, "--password-file"); err != nil {
			return o, err
		}
	}
	if o.RouteUser = f.routeUser; f.routeUser != "" {
		if o.RoutePassword, err = readSecretLine(f.routePasswordFile, "--route-password-file"); err != nil {
			return o, err
		}
	}
	switch {
	case f.tlsCert != "" || f.tlsKey != "":
		o.Auth.TLS, err = transport.ServerTLS(f.tlsCert, f.tlsKey)
	case f.tlsDir != "":
		var ca *transport.DevCA
		if ca, err = transport.LoadOrCreateDevCA(f.tlsDir); err == nil {
			o.Auth.TLS, err = ca.ServerTLS(host, "localhost")
		}
	}
	return o, err
}

func splitHostPort(s, flag string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", flag, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("%s: bad port %q", flag, p)
	}
	return h, n, nil
}

// readSecretLine reads a password file (its first line).
func readSecretLine(path, flag string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required", flag)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
