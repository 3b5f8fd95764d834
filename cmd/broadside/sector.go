package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// sectorOptions are the flags of 'broadside sector'.
type sectorOptions struct {
	natsURL     string
	nats        natsFlags
	log         clusterFlags
	world       uint32
	worker      string
	leaseTTL    time.Duration
	tickerTTL   time.Duration
	tickerGrace time.Duration
	noSecond    bool
	replicas    int
	ticker      bool
	standby     bool
	lineage     bool
	cacheDir    string
	minInterval uint64
	worldSize   int32
	sectors     int
	islands     int
	seed        uint64
}

func newSectorCmd() *cobra.Command {
	var o sectorOptions
	cmd := &cobra.Command{
		Use:   "sector",
		Short: "Run a sector worker: one of the processes that run a world's sectors",
		Long: `Run a sector worker of a world spread over processes and machines.

The worker registers in a NATS KV bucket of leases (broadside-sectors) and owns
the sectors the deterministic assignment gives it among the live workers (they
rebalance when a worker joins or leaves). For each, it appends its lease claim
(the fencing epoch) to the command log, restores the sector from the snapshot
store on NATS (broadside-snapshots) and runs it from the log: migrations are
appended tagged with the epoch, snapshots go to the shared store, lineage to
the shared lineage store (broadside-lineage; --lineage=false records none),
and each tick's frame is published on world.<id>.sector.<n>. When a worker dies its
leases expire (--lease-ttl) and the others take its sectors over; a worker
paused past its leases changes nothing when it wakes.

--standby runs a hot copy of every sector the worker does not own, so that a
takeover starts from it instead of a snapshot and a replay.

--ticker makes the worker compete for the world's Ticker lease: exactly one
holder appends the tick markers. While another holds it, the worker keeps
the holder's schedule from its runners' ticks and, if a marker is
--ticker-grace overdue (the holder died), appends the markers itself until
the lease is held again. One process besides the holder holds the second
Ticker's lease and appends every marker on the holder's schedule
(--no-second-ticker: never this one).

Every worker of a world needs the same game flags (--world-size, --sectors,
--islands, --seed). The log cluster is given with log- prefixed flags, as for
'serve --log' (--log-peers, --log-coord, --log-tls-dir, --log-nats-user, ...).`,
		Example: `  broadside sector --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --replicas 3 --worker w1 --ticker \
    --log-peers 1=h1:7001,2=h2:7002,3=h3:7003,101=h4:7101,102=h5:7102 --log-coord nats://n1:4222 --log-tls-dir tls`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runSector(ctx, cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.natsURL, "nats", "", "the world's NATS servers (leases, snapshots, frames): nats://HOST:PORT, comma separated")
	o.nats.register(f, "")
	o.log.registerPrefixed(f, "log-")
	f.Uint32Var(&o.world, "world", 1, "world id")
	f.StringVar(&o.worker, "worker", "", "this worker's id (letters, digits, - and _; default: host name and process id)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", natsworld.DefaultTTL, "lease length when the lease bucket is created (a dead worker's sectors are free this long after its last renewal)")
	f.DurationVar(&o.tickerTTL, "ticker-lease-ttl", natsworld.DefaultTickerTTL, "the Ticker's lease length when its bucket (broadside-ticker) is created: may be shorter than a sector's (two Tickers overlapping store each tick once), but a short one flaps on a loaded machine")
	f.DurationVar(&o.tickerGrace, "ticker-grace", 0, "with --ticker: how late the next tick marker may be before this worker bridges the ticks itself while another holds the Ticker's lease (0: half a tick period; negative: never)")
	f.BoolVar(&o.noSecond, "no-second-ticker", false, "with --ticker: never hold the second Ticker's lease (whose holder appends every tick marker with the holder's, so that the holder's death costs no tick; the log drops the duplicates)")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the lease bucket and the snapshot and lineage stores when they are created (3 on a NATS cluster)")
	f.BoolVar(&o.ticker, "ticker", false, "compete for the world's Ticker lease and append the tick markers while holding it")
	f.StringVar(&o.cacheDir, "cache-dir", "", "keep local copies of the shared store's snapshots and lineage ranges above 1 MiB here (a Pebble database, at most 256 MiB, keyed by content: never stale); none if empty")
	f.BoolVar(&o.lineage, "lineage", true, "record the owned sectors' lineage in the world's shared lineage store on NATS (broadside-lineage), which front ends answer lineage queries from")
	f.BoolVar(&o.standby, "standby", false, "run a hot copy of every sector this worker does not own (no lease, no publishing): a takeover then starts from it, without restoring and replaying")
	f.Uint64Var(&o.minInterval, "min-snapshot-interval", 10, "least ticks between two snapshots of a sector")
	f.Int32Var(&o.worldSize, "world-size", 4000, "width and height of the sea in metres (as serve)")
	f.IntVar(&o.sectors, "sectors", 2, "sectors per side (as serve)")
	f.IntVar(&o.islands, "islands", 12, "islands (as serve)")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (as serve)")
	return cmd
}

func runSector(ctx context.Context, out io.Writer, o sectorOptions) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.natsURL == "" {
		return errors.New("--nats nats://HOST:PORT is required")
	}
	if o.worker == "" {
		o.worker = natsworld.ProcessID("")
	}
	game, err := broadside.NewGame(broadside.Config{Seed: o.seed, Width: o.worldSize, Height: o.worldSize,
		SectorsX: o.sectors, SectorsY: o.sectors, Islands: o.islands}, 0)
	if err != nil {
		return err
	}
	connOpts, err := o.nats.connOptions()
	if err != nil {
		return err
	}
	nc, err := natscoord.Connect(o.natsURL, connOpts)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var cache *natsworld.BlobCache
	if o.cacheDir != "" {
		if cache, err = natsworld.OpenBlobCache(o.cacheDir, 0, log); err != nil {
			return err
		}
		defer cache.Close()
	}
	st, err := natsworld.OpenWorkerStores(ctx, js, natsworld.WorkerStoresConfig{Cache: cache, World: o.world, Worker: o.worker, LeaseTTL: o.leaseTTL,
		TickerTTL: o.tickerTTL, Replicas: o.replicas, Ticker: o.ticker, Lineage: o.lineage, KindNames: game.KindNames})
	if err != nil {
		return err
	}
	logc, closeLog, err := o.log.dialCluster(ctx, cmdlog.ClientConfig{})
	if err != nil {
		return err
	}
	defer closeLog()
	w, err := natsworld.NewWorker(natsworld.WorkerConfig{World: o.world, Game: game, Log: logc, Leases: st.Leases, Snapshots: st.Snapshots, Lineage: st.Lineage,
		Publisher: nc, Ticker: o.ticker, TickerLeases: st.TickerLeases, TickerGrace: o.tickerGrace, NoSecondTicker: o.noSecond, Standby: o.standby, Logger: log, FramePart: broadside.EncodeSectorPart,
		Policy: snapshot.Policy{MinInterval: o.minInterval}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sector worker %s of world %d: %d sectors, lease %v, frames on %s\n",
		o.worker, o.world, game.Shards, st.Leases.TTL(), natsworld.SectorsSubject(o.world))
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintf(out, "sector worker %s stopped; its leases released\n", o.worker)
	return nil
}
