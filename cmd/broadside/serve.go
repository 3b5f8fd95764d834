package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/world"
	"github.com/anoptic/broadside/replay/world/natsworld"
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
	adminToken string
	adminHosts []string
	exportRate int
	admission  server.AdmissionLimits
	rate       float64
	burst      int
	durability string
	external   clusterFlags
	useLog     bool
	worldSize  int32
	sectors    int
	islands    int
	seed       uint64
	interest   float64
	specDelay  time.Duration
	ackHold    time.Duration
	ackInState bool
	retain     time.Duration
	record     string
	signKey    string
	viewerDir  string
	// worldURL (--world) makes the server a front end of a world whose
	// sectors run on sector workers: their frames come from its NATS.
	worldURL  string
	worldID   uint32
	worldNATS natsFlags
	// worldReplicas (--world-replicas): the lease buckets' replicas
	// if the front end creates them.
	worldReplicas int
	worldTicker   bool
	tickerGrace   time.Duration
	noSecond      bool
	// killAtSnapshot, a test hook, SIGKILLs the process as it is about to
	// store its Nth snapshot.
	killAtSnapshot int
	// killAtRestore, a test hook, SIGKILLs the process as it is about to
	// read its Nth snapshot back (restoring a sector).
	killAtRestore int
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the dedicated game server",
		Long: `Run the dedicated game server: players connect over QUIC (ALPN broadside/1),
authenticate with a signed token ('broadside token'), and send commands that are
verified, rate-limited, appended to the command log and acknowledged once the
log holds them.

What an acknowledgement promises (--durability):
  fsync   (the default) 'durable': synced to the write-ahead log of every
          sequencing replica. A server killed at any moment (SIGKILL, power
          loss) restarts on its --data and resumes the same match with every
          acknowledged command.
  memory  (opt-in, announced at start-up) 'replicated': in memory on every
          sequencing replica. Faster; but with the embedded log a crash of
          this process loses the replicas' state, and its --data cannot
          resume (the server says so and how to start a new match).

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
	f.StringVar(&o.viewerDir, "viewer-dir", "", "host the browser viewer (make viewer-wasm builds it into bin/web) at /viewer/ on the admin address, behind its auth, following this server as a spectator")
	f.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "admin HTTP address (empty: off): /healthz (200 while the process is up), /readyz (200 when the log answers, every sector is live and the world ticks; 503 and the reason otherwise), /world/hashes?from=T (every sector's state hash per tick, to check against a re-simulation), /metrics (with broadside_world_sector_state: 0 live, 1 recovering, 2 stopped), /debug/pprof/, lineage queries (/lineage, /lineage/store/) and the log export (/replay/, for 'replay export --server'); with --world, a front end's: /readyz (200 when connected to NATS, every sector leased by a worker and a tick assembled in the last 2 s), /world (its status as JSON: the sectors' owners and epochs, the Ticker's holder, the live workers, ticks assembled, frame latency), /world/hashes (as the workers' frames carried them), the lineage queries (from the world's shared lineage store) and the log export")
	f.StringVar(&o.adminToken, "admin-token-file", "", "file holding the admin bearer token (first line, at least 16 bytes): every admin request then needs 'Authorization: Bearer TOKEN'; required when --admin-addr is not loopback")
	f.StringSliceVar(&o.adminHosts, "admin-hosts", nil, "further host names admin clients may use (the Host header of every admin request must be localhost, a loopback address, --admin-addr's host or one of these: DNS rebinding is refused)")
	f.IntVar(&o.exportRate, "export-rate", 8<<20, "bytes per second all log exports (/replay/log) together may read, through their own log client (at most 2 at once)")
	f.IntVar(&o.admission.MaxConns, "max-conns", 4096, "player connections held in total")
	f.IntVar(&o.admission.MaxConnsPerAddr, "max-conns-per-addr", 1024, "player connections held per source address (IPv4 address or IPv6 /64)")
	f.IntVar(&o.admission.MaxPreHello, "max-pre-hello", 256, "connections without a valid Hello yet, in total (each gets 2s)")
	f.IntVar(&o.admission.MaxPreHelloPerAddr, "max-pre-hello-per-addr", 32, "connections without a valid Hello yet, per source address")
	f.IntVar(&o.admission.RetryAbove, "retry-above", 64, "with more connections than this without Hello, new ones must validate their address with a QUIC Retry (-1: always)")
	f.Float64Var(&o.rate, "rate", 60, "commands per second a player may send (token bucket)")
	f.IntVar(&o.burst, "burst", 30, "token bucket size")
	f.StringVar(&o.durability, "durability", "fsync", durabilityUsage+"; with --log, say what the cluster's replicas run (logd --durability)")
	f.BoolVar(&o.useLog, "log", false, "join an external command log cluster instead of running one")
	f.Int32Var(&o.worldSize, "world-size", 4000, "width and height of the sea in metres")
	f.IntVar(&o.sectors, "sectors", 2, "sectors (sim shards) per side: the world runs sectors² shards")
	f.IntVar(&o.islands, "islands", 12, "islands")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (islands, spawn points, gunnery)")
	f.Float64Var(&o.interest, "interest", 600, "players see ships and balls in the 3×3 cells of this size (metres) around their ship")
	f.DurationVar(&o.specDelay, "spectator-delay", 2*time.Second, "how far behind the players spectators see the world")
	f.DurationVar(&o.ackHold, "ack-hold", 0, "how long a command's acknowledgement may wait for the player's next state update to share its packet (0: sent when stored; 33ms: every acknowledgement with an update, half a tick later on average)")
	f.BoolVar(&o.ackInState, "acks-in-state", false, "held acknowledgements ride inside the state datagrams (see server.Config.AcksInState; saves no packet with quic-go v0.65)")
	f.DurationVar(&o.retain, "retain", 0, "trim the command log and the lineage to about this much play (never past what recovery needs); 0 keeps the whole match (needed to export a recording of it)")
	f.StringVar(&o.signKey, "sign-key", "", "with --record: sign the recording's log checkpoints with this signer key `FILE` (broadside keygen)")
	f.StringVar(&o.record, "record", "", "record the live match into this .bsr `FILE` (from the log, by runners of its own: with --world too); after a crash and restart the recording continues in a new segment beside it (FILE.2.bsr, ...), each of which 'replay verify' checks")
	f.IntVar(&o.killAtSnapshot, "test-kill-at-snapshot", 0, "test hook: SIGKILL this process as it is about to store its Nth snapshot")
	f.IntVar(&o.killAtRestore, "test-kill-at-restore", 0, "test hook: SIGKILL this process as it is about to read back its Nth snapshot (in a recovery)")
	_ = f.MarkHidden("test-kill-at-snapshot")
	_ = f.MarkHidden("test-kill-at-restore")
	o.external.registerPrefixed(f, "log-")
	f.StringVar(&o.worldURL, "world", "", "be a front end of a world run by sector workers ('broadside sector'): nats://HOST:PORT of its NATS servers (comma separated), with --log and the log- flags of its command log; this process runs sessions and intake, no sectors, and serves players the frames the workers publish")
	f.Uint32Var(&o.worldID, "world-id", 1, "with --world: the world id (as the workers' --world)")
	f.IntVar(&o.worldReplicas, "world-replicas", 1, "with --world: replicas of the lease buckets if this front end creates them (3 on a NATS cluster)")
	f.BoolVar(&o.worldTicker, "ticker", false, "with --world: compete for the world's Ticker lease (with the workers' --ticker) and append the tick markers while holding it")
	f.DurationVar(&o.tickerGrace, "ticker-grace", 0, "with --world --ticker: as sector --ticker-grace")
	f.BoolVar(&o.noSecond, "no-second-ticker", false, "with --world --ticker: as sector --no-second-ticker")
	o.worldNATS.register(f, "")
	return cmd
}

// serverTLS returns the players' TLS configuration the flags give.
func (o serveOptions) serverTLS(out io.Writer) (*tls.Config, error) {
	switch {
	case o.certFile != "" && o.keyFile != "":
		return transport.ServerTLS(o.certFile, o.keyFile)
	case o.dev:
		ca, err := transport.LoadOrCreateDevCA(o.tlsDir)
		if err != nil {
			return nil, err
		}
		cert := filepath.Join(o.tlsDir, transport.DevCACertFile)
		fmt.Fprintf(out, "development CA: clients trust %s (bots: --ca %s)\n", cert, cert)
		return ca.ServerTLS("localhost")
	}
	return nil, fmt.Errorf("give --dev (development CA) or --cert and --key")
}

// worldHandlers are the admin endpoints of the world running (nil while
// none is).
func worldHandlers(running func() *world.World, export world.ExportConfig, checks ...func() error) map[string]http.Handler {
	lineageStore := func() (lineage.Store, func()) {
		if w := running(); w != nil {
			return w.LineageStore()
		}
		return nil, func() {}
	}
	return map[string]http.Handler{
		"/lineage":        lineageHandler(lineageStore),
		"/lineage/store/": lineage.StoreHandler(lineageStore),
		"/replay/":        world.ExportHandler(running, export),
		"/healthz":        world.HealthHandler(),
		"/readyz":         world.ReadyHandler(running, checks...),
		"/world/hashes":   world.HashesHandler(running),
	}
}

// killAt returns a function that SIGKILLs this process the nth time it
// is called (nil for n 0): the crash tests' way to die in the middle of a
// snapshot write or a recovery.
func killAt(n int) func() {
	if n <= 0 {
		return nil
	}
	var seen atomic.Int64
	return func() {
		if seen.Add(1) == int64(n) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}

// hooks returns the world's test kill points the flags ask for.
func (o serveOptions) hooks() (beforePut func(snapshot.Meta), beforeGet func(uint32, uint64)) {
	if k := killAt(o.killAtSnapshot); k != nil {
		beforePut = func(snapshot.Meta) { k() }
	}
	if k := killAt(o.killAtRestore); k != nil {
		beforeGet = func(uint32, uint64) { k() }
	}
	return beforePut, beforeGet
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
	secret, err := server.LoadOrCreateSecret(o.secretFile)
	if err != nil {
		return err
	}
	serverTLS, err := o.serverTLS(out)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	game, err := broadside.NewGame(o.gameConfig(), int64(o.interest*1000))
	if err != nil {
		return err
	}
	var worldRef atomic.Pointer[world.World]
	var exportRef atomic.Pointer[world.ExportLog]
	exportLog := func() world.ExportLog {
		if l := exportRef.Load(); l != nil {
			return *l
		}
		return nil
	}
	var storing world.StoringCheck
	exportCfg := world.ExportConfig{Log: exportLog, BytesPerSecond: o.exportRate}
	adminHandlers := worldHandlers(worldRef.Load, exportCfg, storing.Err)
	var feRef atomic.Pointer[natsworld.FrontEndNode]
	if o.worldURL != "" { // a front end: its own readiness, status and hashes, lineage from the shared store
		adminHandlers["/readyz"] = natsworld.FrontEndReadyHandler(feRef.Load, storing.Err)
		adminHandlers["/world"] = natsworld.FrontEndStatusHandler(feRef.Load)
		adminHandlers["/world/hashes"] = natsworld.FrontEndHashesHandler(feRef.Load)
		feLineage := func() (lineage.Store, func()) { return feRef.Load().LineageStore() }
		adminHandlers["/lineage"], adminHandlers["/lineage/store/"] = lineageHandler(feLineage), lineage.StoreHandler(feLineage)
		adminHandlers["/replay/"] = world.LogExportHandler(func() ([]byte, bool) { return game.Config, feRef.Load() != nil }, exportCfg)
	}
	if err := addViewer(adminHandlers, o, secret); err != nil {
		return err
	}
	if err := serveAdminGuarded(ctx, adminauth.Options{Addr: o.adminAddr, TokenFile: o.adminToken, Hosts: o.adminHosts}, reg, log,
		adminHandlers); err != nil {
		return err
	}

	specDelay := uint64(o.specDelay / (time.Second / broadside.TickRate))
	if specDelay+16 > world.FrameRing {
		return fmt.Errorf("--spectator-delay %v: at most %v (the server keeps %d ticks of state)", o.specDelay,
			time.Duration(world.FrameRing-16)*time.Second/broadside.TickRate, world.FrameRing)
	}
	durability, err := parseDurability(o.durability)
	if err != nil {
		return err
	}
	announceDurability(out, durability)
	logc, worldc, exportc, logStoring, closeLog, err := openServerLog(ctx, o, durability, log, reg)
	if err != nil {
		return err
	}
	defer closeLog()
	exportRef.Store(&exportc)
	storing.Set(logStoring)
	go storing.Watch(ctx, log)

	frames := world.NewFrames(game.Shards, game.NewFrame)
	srv, err := server.New(server.Config{
		ListenAddr: o.listen, TLS: serverTLS, Secret: secret, Log: logc, Durability: server.DurabilityOf(durability),
		Limits: server.IntakeLimits{Rate: rate.Limit(o.rate), Burst: o.burst}, Logger: log, Registry: reg,
		State: broadside.NewStateSource(frames), SpectatorDelay: specDelay, AckHold: o.ackHold, AcksInState: o.ackInState,
		TickRate: broadside.TickRate, Tick: frames.Latest, World: game.Config, Storing: storing.Err, Admission: o.admission,
	})
	if err != nil {
		return err
	}
	// Players learn which of their commands a tick applied with that
	// tick's state.
	frames.OnApplied(srv.NoteApplied)
	beforePut, beforeGet := o.hooks()
	var running *world.World
	recID := uint32(world.DefaultID) // the world's id in a recording
	if o.worldURL != "" {
		recID = o.worldID
		node, stopFE, err := startFrontEnd(ctx, out, o, worldc, game.Shards, frames, srv.Publish, log)
		if err != nil {
			return err
		}
		defer stopFE()
		feRef.Store(node)
	} else if running, err = world.Start(ctx, world.Config{
		Game: game, Dir: filepath.Join(o.dataDir, "world"), Log: worldc, Frames: frames, OnFrame: srv.Publish,
		Logger: log, Registry: reg, Retain: o.retain, BeforeSnapshotPut: beforePut, BeforeSnapshotGet: beforeGet,
	}); err != nil {
		return err
	} else {
		worldRef.Store(running)
	}
	var rec *world.Recording
	if o.record != "" { // from the log, by runners of its own (on a front end too: it has the log)
		var seg string
		signer, err := bsr.LoadSigner(o.signKey)
		if err == nil {
			rec, seg, err = world.StartSegmentRecording(ctx, o.record, game, recID, worldc, bsr.RecordConfig{Logger: quietLogger(), Signer: signer})
		}
		if err != nil {
			if running != nil {
				running.Stop(context.Background())
			}
			return err
		}
		fmt.Fprintf(out, "recording the match to %s\n", seg)
	}
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
		if running != nil {
			running.Stop(context.Background())
		}
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
	final := frames.Latest() // a front end's: the last tick assembled (its workers snapshot their sectors)
	if running != nil {
		if final, err = running.Stop(dctx); err != nil {
			log.Warn("final snapshot", "err", err)
		} else {
			fmt.Fprintf(out, "final snapshot of every sector stored at tick %d\n", final)
		}
	}
	if rec != nil {
		if _, err := rec.Finish(dctx, final); err != nil {
			log.Warn("recording", "err", err)
		} else {
			fmt.Fprintf(out, "recording complete through tick %d: %s\n", final, rec.Path())
		}
	}
	stopServe()
	err = <-served
	fmt.Fprintln(out, "server stopped")
	return err
}

// startFrontEnd runs the front end of the world --world names: each
// tick's frame assembled from the parts its sector workers publish
// (natsworld.FrontEndNode).
func startFrontEnd(ctx context.Context, out io.Writer, o serveOptions, worldLog world.Log, sectors int, frames *world.Frames, publish func(uint64), log *slog.Logger) (node *natsworld.FrontEndNode, stop func(), err error) {
	if !o.useLog {
		return nil, nil, errors.New("--world needs the world's command log: --log and its log- flags (as the workers')")
	}
	connOpts, err := o.worldNATS.connOptions()
	if err != nil {
		return nil, nil, err
	}
	nc, err := natscoord.Connect(o.worldURL, connOpts)
	if err != nil {
		return nil, nil, err
	}
	node, err = natsworld.StartFrontEndNode(ctx, natsworld.FrontEndNodeConfig{World: o.worldID, Sectors: sectors, Frames: frames, Conn: nc,
		OnFrame: publish, Logger: log, Ticker: o.worldTicker, TickerID: natsworld.ProcessID("fe-"),
		TickerGrace: o.tickerGrace, NoSecondTicker: o.noSecond,
		Log: worldLog, Rate: broadside.TickRate, Replicas: o.worldReplicas, Lineage: true})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	fmt.Fprintf(out, "front end of world %d: frames of its %d sectors from %s (no sector runs here)\n", o.worldID, sectors, natsworld.SectorsSubject(o.worldID))
	return node, func() {
		fmt.Fprintf(out, "front end: %s\n", node.Stop())
		nc.Close()
	}, nil
}

// openServerLog returns the command log: an embedded cluster, or clients
// of an external one. Players' commands, the world (tick markers,
// migrations, the runners' reads) and log exports use three clients: a
// client keeps a bounded number of rounds in flight, and under a flood of
// commands or exports the world's tick markers must not wait behind them.
//
// storing reports whether the log can store (nil: it can, or it is an
// external cluster whose nodes report their own health).
func openServerLog(ctx context.Context, o serveOptions, d seq.Durability, log *slog.Logger, reg *prometheus.Registry) (intake, worldLog world.Log, export world.ExportLog, storing func() error, closeAll func(), err error) {
	latency := node.AppendLatency(reg)
	if o.useLog {
		c, closeC, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{OnAppendLatency: latency})
		if err != nil {
			return nil, nil, nil, nil, nil, err
		}
		w, closeW, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{})
		if err != nil {
			closeC()
			return nil, nil, nil, nil, nil, err
		}
		e, closeE, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{})
		if err != nil {
			closeW()
			closeC()
			return nil, nil, nil, nil, nil, err
		}
		return c, w, e, nil, func() { closeE(); closeW(); closeC() }, nil
	}
	if err := embedded.CheckRestartable(o.dataDir, d); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	el, err := embedded.Start(ctx, embedded.Options{Dir: filepath.Join(o.dataDir, "log"), Durability: d, OnAppendLatency: latency})
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	log.Info("embedded command log", "replicas", el.Local().Replicas(), "shards", el.Local().Layout().Shards, "data", o.dataDir)
	e := el.Local().NewClient(cmdlog.ClientConfig{})
	return el.Log(), el.World(), e, el.Storing, func() { e.Close(); el.Close() }, nil
}

// serveAdmin serves /metrics and /debug/pprof on addr until ctx ends,
// loopback only (no token: beyond loopback it logs why and serves
// nothing), behind the Host allow-list.
func serveAdmin(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger, extra map[string]http.Handler) {
	if err := serveAdminGuarded(ctx, adminauth.Options{Addr: addr}, reg, log, extra); err != nil {
		log.Error("admin server not started", "err", err)
	}
}

// serveAdminGuarded serves /metrics, /debug/pprof and extra on o.Addr
// (empty: nothing) until ctx ends, behind the guard o describes
// (adminauth.Serve).
func serveAdminGuarded(ctx context.Context, o adminauth.Options, reg *prometheus.Registry, log *slog.Logger, extra map[string]http.Handler) error {
	return adminauth.Serve(ctx, o, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), log, extra)
}
