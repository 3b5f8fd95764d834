package natsworld

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/lineage"
)

// ProcessID returns an id for this process as a worker or a Ticker's
// competitor: prefix, then the host name's letters, digits, '-' and '_'
// (at most 40 of them; "worker" if it has none), '-' and the process id.
// It is a valid worker id (LeasesConfig.Worker) for a prefix of at most
// 12 such characters.
func ProcessID(prefix string) string {
	host, _ := os.Hostname()
	out := []byte(nil)
	for _, c := range []byte(host) {
		if c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = []byte("worker")
	}
	return fmt.Sprintf("%s%s-%d", prefix, out[:min(len(out), 40)], os.Getpid())
}

// WorkerStoresConfig names what OpenWorkerStores opens for one worker.
type WorkerStoresConfig struct {
	World  uint32
	Worker string
	// LeaseTTL and TickerTTL are the sectors' and the Ticker's lease
	// lengths when their buckets are created; Replicas every bucket's
	// replicas then (3 on a NATS cluster).
	LeaseTTL, TickerTTL time.Duration
	Replicas            int
	// Ticker opens the Ticker's lease bucket; Lineage the shared lineage
	// store, with the game's command kind names.
	Ticker, Lineage bool
	KindNames       map[uint8]string
	// Cache, if set, keeps local copies of the large snapshots and
	// lineage ranges (BlobCache).
	Cache *BlobCache
}

// WorkerStores are a worker's shared state on NATS, for WorkerConfig.
type WorkerStores struct {
	Leases       *Leases
	TickerLeases *Leases // nil without Ticker
	Snapshots    *SnapshotStore
	Lineage      lineage.Store // nil without Lineage
}

// OpenWorkerStores opens (creating if needed) the lease buckets and the
// shared snapshot and lineage stores a worker of cfg.World uses.
func OpenWorkerStores(ctx context.Context, js jetstream.JetStream, cfg WorkerStoresConfig) (WorkerStores, error) {
	var s WorkerStores
	var err error
	if s.Leases, err = OpenLeases(ctx, js, LeasesConfig{World: cfg.World, Worker: cfg.Worker, TTL: cfg.LeaseTTL, Replicas: cfg.Replicas}); err != nil {
		return s, err
	}
	if s.Snapshots, err = OpenSnapshotStore(ctx, js, SnapshotStoreConfig{World: cfg.World, Replicas: cfg.Replicas, Cache: cfg.Cache}); err != nil {
		return s, err
	}
	if s.Lineage, err = OpenWorkerLineage(ctx, js, cfg.Lineage, LineageStoreConfig{World: cfg.World, Replicas: cfg.Replicas, KindNames: cfg.KindNames, Cache: cfg.Cache}); err != nil {
		return s, err
	}
	if cfg.Ticker {
		s.TickerLeases, err = OpenTickerLeases(ctx, js, LeasesConfig{World: cfg.World, Worker: cfg.Worker, TTL: cfg.TickerTTL, Replicas: cfg.Replicas})
	}
	return s, err
}
