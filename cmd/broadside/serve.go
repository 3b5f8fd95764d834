package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/netcode"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/time/rate"
)

// serveOptions are the flags of 'broadside serve'.
type serveOptions struct {
	listen     string
	dev        bool
	tlsDir     string
	certFile   string
	keyFile    string
	secretFile string
	dataDir    string
	adminAddr  string
	rate       float64
	burst      int
	fsync      bool
	external   clusterFlags
	useLog     bool
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the dedicated game server",
		Long: `Run the dedicated game server: players connect over QUIC (ALPN broadside/1),
authenticate with a signed token ('broadside token'), and send commands that are
verified, rate-limited, appended to the command log and acknowledged when
durable.

By default the server runs its own command log in-process (3 sequencing
replicas and 2 shards on loopback QUIC, Pebble under --data). --log joins an
external cluster started with 'broadside logd' (give its flags with a log-
prefix: --log-peers, --log-coord, --log-tls-dir, ...).

--dev creates a development CA under --tls-dir and prints how clients trust
it; in production give --cert and --key.`,
		Example: `  broadside serve --dev
  broadside token --player ada --secret-file broadside-dev/server.secret
  broadside bots --server 127.0.0.1:4433 --ca broadside-dev/tls/ca.pem --secret-file broadside-dev/server.secret --n 50`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:4433", "UDP address for players")
	f.BoolVar(&o.dev, "dev", false, "use (creating if needed) a development CA under --tls-dir")
	f.StringVar(&o.tlsDir, "tls-dir", "broadside-dev/tls", "development CA directory (with --dev)")
	f.StringVar(&o.certFile, "cert", "", "production: certificate file")
	f.StringVar(&o.keyFile, "key", "", "production: private key file")
	f.StringVar(&o.secretFile, "secret-file", "broadside-dev/server.secret", "player token secret (created if missing)")
	f.StringVar(&o.dataDir, "data", "broadside-dev/data", "data directory of the embedded command log")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "serve /metrics and /debug/pprof here (empty: off)")
	f.Float64Var(&o.rate, "rate", 60, "commands per second a player may send (token bucket)")
	f.IntVar(&o.burst, "burst", 30, "token bucket size")
	f.BoolVar(&o.fsync, "fsync", false, "embedded log: sequencing replicas sync a write-ahead log before acknowledging")
	f.BoolVar(&o.useLog, "log", false, "join an external command log cluster instead of running one")
	o.external.registerPrefixed(f, "log-")
	return cmd
}

func runServe(ctx context.Context, out io.Writer, o serveOptions) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := os.MkdirAll(filepath.Dir(o.secretFile), 0o755); err != nil {
		return err
	}
	secret, err := loadOrCreateSecret(o.secretFile)
	if err != nil {
		return err
	}
	var serverTLS *tls.Config
	switch {
	case o.certFile != "" && o.keyFile != "":
		if serverTLS, err = transport.ServerTLS(o.certFile, o.keyFile); err != nil {
			return err
		}
	case o.dev:
		ca, err := transport.LoadOrCreateDevCA(o.tlsDir)
		if err != nil {
			return err
		}
		if serverTLS, err = ca.ServerTLS("localhost"); err != nil {
			return err
		}
		fmt.Fprintf(out, "development CA: clients trust %s (bots: --ca %s)\n", filepath.Join(o.tlsDir, transport.DevCACertFile), filepath.Join(o.tlsDir, transport.DevCACertFile))
	default:
		return fmt.Errorf("give --dev (development CA) or --cert and --key")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	serveAdmin(ctx, o.adminAddr, reg, log)

	appender, closeLog, err := openServerLog(ctx, o, log, reg)
	if err != nil {
		return err
	}
	defer closeLog()

	srv, err := netcode.NewServer(netcode.ServerConfig{
		ListenAddr: o.listen, TLS: serverTLS, Secret: secret, Log: appender,
		Limits: netcode.IntakeLimits{Rate: rate.Limit(o.rate), Burst: o.burst}, Logger: log, Registry: reg,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "broadside server listening on %s (ALPN %s); tokens: broadside token --player NAME --secret-file %s\n",
		srv.Addr(), netcode.ALPN, o.secretFile)
	err = srv.Serve(ctx)
	fmt.Fprintln(out, "server stopped")
	return err
}

// openServerLog returns the command log the server appends to: an embedded
// cluster, or a client of an external one.
func openServerLog(ctx context.Context, o serveOptions, log *slog.Logger, reg *prometheus.Registry) (netcode.Appender, func(), error) {
	latency := node.AppendLatency(reg)
	if o.useLog {
		c, closeAll, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{OnAppendLatency: latency})
		if err != nil {
			return nil, nil, err
		}
		return c, closeAll, nil
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, nil, err
	}
	server, client, err := ca.MutualTLS("localhost")
	if err != nil {
		return nil, nil, err
	}
	group := mesh.NewGroup(server, client, quiet)
	disk := &cmdlog.DiskStorage{Dir: o.dataDir, Logger: quiet}
	durability := seq.Memory
	if o.fsync {
		durability = seq.Fsync
	}
	lc, err := cmdlog.StartLocal(ctx, cmdlog.LocalConfig{
		Coordinator: coord.NewMemory(), Network: group, Durability: durability, Logger: quiet,
		Timing: node.Timing{Tick: 5 * time.Millisecond}, Core: seq.Config{SuspectTicks: 60},
		NewStorage: disk.NewStorage, NewWAL: disk.NewWAL,
	})
	if err != nil {
		group.Close()
		disk.Close()
		return nil, nil, err
	}
	c := lc.NewClient(cmdlog.ClientConfig{OnAppendLatency: latency})
	log.Info("embedded command log", "replicas", lc.Replicas(), "shards", lc.Layout().Shards, "data", o.dataDir)
	return c, func() {
		c.Close()
		lc.Close()
		group.Close()
		disk.Close()
	}, nil
}

// serveAdmin serves /metrics and /debug/pprof on addr until ctx ends.
func serveAdmin(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Error("admin server", "addr", addr, "err", err)
		}
	}()
	log.Info("admin", "metrics", "http://"+addr+"/metrics", "pprof", "http://"+addr+"/debug/pprof/")
}
