package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
)

func newNatsCmd() *cobra.Command {
	var f natscoord.NodeSpec
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run one NATS server node (JetStream) of a Broadside cluster in its own process",
		Long: `Run one node of a NATS cluster with JetStream, embedded (nats-server as a
library): the coordinator, the leases, the snapshot and lineage stores and the
frames of a world run on it. Three of them routed to each other make an R3
cluster that survives the loss of one; --route-user authenticates the routes
and --route-tls encrypts them (mutual TLS). Each keeps its JetStream store in
--store-dir and fsyncs every write (sync always); a node SIGKILLed and
restarted on the same directory catches up from the others.

Any standard nats-server cluster (2.10 or later, JetStream enabled, sync
always) serves as well: this command only saves installing one.`,
		Example: `  broadside nats --name n1 --listen 127.0.0.1:4222 --cluster-listen 127.0.0.1:6222 \
    --routes 127.0.0.1:6222,127.0.0.1:6223,127.0.0.1:6224 --store-dir /var/lib/broadside/nats \
    --user broadside --password-file nats.pw --tls-dir tls --route-tls`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.Options()
			if err != nil {
				return err
			}
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			node, err := natscoord.StartNode(opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nats node %s listening on %s (cluster %q on %s, %d routes), JetStream in %s\n",
				opts.Name, node.ClientURL(), opts.ClusterName, f.ClusterListen, len(opts.Routes), opts.StoreDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			node.Shutdown()
			fmt.Fprintf(cmd.OutOrStdout(), "nats node %s stopped\n", opts.Name)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", "", "this node's name, unique in the cluster (required with --cluster-listen)")
	fl.StringVar(&f.Listen, "listen", "127.0.0.1:4222", "client address HOST:PORT")
	fl.StringVar(&f.ClusterListen, "cluster-listen", "", "route address HOST:PORT for the other nodes (empty: a single node)")
	fl.StringVar(&f.ClusterName, "cluster-name", "broadside", "NATS cluster name (the same on every node)")
	fl.StringVar(&f.Routes, "routes", "", "every node's route address HOST:PORT, comma separated (this node's own is skipped)")
	fl.StringVar(&f.StoreDir, "store-dir", "", "JetStream store directory (required; keep it across restarts)")
	fl.StringVar(&f.User, "user", "", "the user clients must authenticate as (with --password-file; required beyond loopback)")
	fl.StringVar(&f.PasswordFile, "password-file", "", "file holding --user's password")
	fl.StringVar(&f.RouteUser, "route-user", "", "user the nodes authenticate their routes with (required for routes beyond loopback)")
	fl.StringVar(&f.RoutePasswordFile, "route-password-file", "", "file holding --route-user's password")
	fl.StringVar(&f.TLSDir, "tls-dir", "", "development CA directory: serve clients over TLS with a certificate from it")
	fl.StringVar(&f.TLSCert, "tls-cert", "", "production: serve clients over TLS with this certificate (with --tls-key)")
	fl.StringVar(&f.TLSKey, "tls-key", "", "private key of --tls-cert")
	fl.BoolVar(&f.RouteTLS, "route-tls", false, "encrypt the routes with mutual TLS: this node's certificate from --tls-dir's CA, or --tls-cert (which must allow client authentication too); peers' verified against --route-ca (default --tls-dir's CA)")
	fl.StringVar(&f.RouteCA, "route-ca", "", "with --route-tls: the CA `FILE` (PEM) the other nodes' route certificates must chain to (required with --tls-cert)")
	fl.StringVar(&f.Sync, "sync", "always", "when JetStream fsyncs: always (every write) or periodic (nats-server's default, every 2 minutes)")
	return cmd
}
