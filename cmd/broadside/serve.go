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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/world"
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
	worldSize  int32
	sectors    int
	islands    int
	seed       uint64
	interest   float64
	specDelay  time.Duration
	retain     time.Duration
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
	f.StringVar(&o.dataDir, "data", "broadside-dev/data", "data directory: the embedded command log (log/: shards, write-ahead logs, coordinator) and the world's snapshot and lineage stores (world/)")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "admin HTTP address (empty: off): /metrics, /debug/pprof/, lineage queries (/lineage, /lineage/store/) and the log export (/replay/, for 'replay export --server')")
	f.Float64Var(&o.rate, "rate", 60, "commands per second a player may send (token bucket)")
	f.IntVar(&o.burst, "burst", 30, "token bucket size")
	f.BoolVar(&o.fsync, "fsync", false, "embedded log: sequencing replicas sync a write-ahead log before acknowledging")
	f.BoolVar(&o.useLog, "log", false, "join an external command log cluster instead of running one")
	f.Int32Var(&o.worldSize, "world-size", 4000, "width and height of the sea in metres")
	f.IntVar(&o.sectors, "sectors", 2, "sectors (sim shards) per side: the world runs sectors² shards")
	f.IntVar(&o.islands, "islands", 12, "islands")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (islands, spawn points, gunnery)")
	f.Float64Var(&o.interest, "interest", 600, "players see ships and balls in the 3×3 cells of this size (metres) around their ship")
	f.DurationVar(&o.specDelay, "spectator-delay", 2*time.Second, "how far behind the players spectators see the world")
	f.DurationVar(&o.retain, "retain", 0, "trim the command log and the lineage to about this much play (never past what recovery needs); 0 keeps the whole match (needed to export a recording of it)")
	o.external.registerPrefixed(f, "log-")
	return cmd
}

// gameConfig returns the world the flags describe.
func (o serveOptions) gameConfig() broadside.Config {
	return broadside.Config{Seed: o.seed, Width: o.worldSize, Height: o.worldSize, SectorsX: o.sectors, SectorsY: o.sectors, Islands: o.islands}
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
	game, err := broadside.NewGame(o.gameConfig(), int64(o.interest*1000))
	if err != nil {
		return err
	}
	var worldRef atomic.Pointer[world.World]
	lineageStore := func() (lineage.Store, func()) {
		if w := worldRef.Load(); w != nil {
			return w.LineageStore()
		}
		return nil, func() {}
	}
	serveAdmin(ctx, o.adminAddr, reg, log, map[string]http.Handler{
		"/lineage":        lineageHandler(lineageStore),
		"/lineage/store/": lineage.StoreHandler(lineageStore),
		"/replay/":        world.ExportHandler(worldRef.Load),
	})

	specDelay := uint64(o.specDelay / (time.Second / broadside.TickRate))
	if specDelay+16 > world.FrameRing {
		return fmt.Errorf("--spectator-delay %v: at most %v (the server keeps %d ticks of state)", o.specDelay,
			time.Duration(world.FrameRing-16)*time.Second/broadside.TickRate, world.FrameRing)
	}
	logc, worldc, closeLog, err := openServerLog(ctx, o, log, reg)
	if err != nil {
		return err
	}
	defer closeLog()

	frames := world.NewFrames(game.Shards, game.NewFrame)
	// Acknowledgements say what the log promises: durable only when the
	// embedded log fsyncs (an external log's mode is not known here).
	durability := server.Replicated
	if o.fsync && !o.useLog {
		durability = server.Durable
	}
	srv, err := server.New(server.Config{
		ListenAddr: o.listen, TLS: serverTLS, Secret: secret, Log: logc, Durability: durability,
		Limits: server.IntakeLimits{Rate: rate.Limit(o.rate), Burst: o.burst}, Logger: log, Registry: reg,
		State: broadside.NewStateSource(frames), SpectatorDelay: specDelay,
		TickRate: broadside.TickRate, Tick: frames.Latest, World: game.Config,
	})
	if err != nil {
		return err
	}
	// Players learn which of their commands a tick applied with that
	// tick's state.
	frames.OnApplied(srv.NoteApplied)
	running, err := world.Start(ctx, world.Config{
		Game: game, Dir: filepath.Join(o.dataDir, "world"), Log: worldc, Frames: frames, OnFrame: srv.Publish,
		Logger: log, Registry: reg, Retain: o.retain,
	})
	if err != nil {
		return err
	}
	worldRef.Store(running)
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServe()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	fmt.Fprintf(out, "broadside server listening on %s (ALPN %s): a %d m sea in %d sectors, %d Hz\n",
		srv.Addr(), wire.ALPN, o.worldSize, game.Shards, broadside.TickRate)
	fmt.Fprintf(out, "tokens: broadside token --player NAME --secret-file %s\n", o.secretFile)
	select {
	case <-ctx.Done():
	case err := <-served:
		running.Stop(context.Background())
		return err
	}
	// Graceful shutdown: stop intake and let accepted commands become
	// durable, snapshot every sector, then close the sessions.
	fmt.Fprintln(out, "shutting down: draining intake")
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Drain(dctx); err != nil {
		log.Warn("drain", "err", err)
	}
	final, err := running.Stop(dctx)
	if err != nil {
		log.Warn("final snapshot", "err", err)
	} else {
		fmt.Fprintf(out, "final snapshot of every sector stored at tick %d\n", final)
	}
	stopServe()
	err = <-served
	fmt.Fprintln(out, "server stopped")
	return err
}

// openServerLog returns the command log: an embedded cluster, or clients
// of an external one. Players' commands and the world (tick markers,
// migrations, the runners' reads) use two clients: a client keeps a bounded
// number of append rounds in flight, and under a flood of commands the
// world's tick markers must not wait behind them.
func openServerLog(ctx context.Context, o serveOptions, log *slog.Logger, reg *prometheus.Registry) (intake, worldLog world.Log, closeAll func(), err error) {
	latency := node.AppendLatency(reg)
	if o.useLog {
		c, closeC, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{OnAppendLatency: latency})
		if err != nil {
			return nil, nil, nil, err
		}
		w, closeW, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{})
		if err != nil {
			closeC()
			return nil, nil, nil, err
		}
		return c, w, func() { closeW(); closeC() }, nil
	}
	if err := embedded.CheckRestartable(o.dataDir, o.fsync); err != nil {
		return nil, nil, nil, err
	}
	el, err := embedded.Start(ctx, embedded.Options{Dir: filepath.Join(o.dataDir, "log"), Fsync: o.fsync, OnAppendLatency: latency})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("embedded command log", "replicas", el.Local().Replicas(), "shards", el.Local().Layout().Shards, "data", o.dataDir)
	return el.Log(), el.World(), el.Close, nil
}

// serveAdmin serves /metrics and /debug/pprof on addr until ctx ends.
func serveAdmin(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger, extra map[string]http.Handler) {
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
	for path, h := range extra {
		mux.Handle(path, h)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 2 * time.Minute}
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
