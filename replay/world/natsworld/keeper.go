package natsworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// KeeperConfig configures a Keeper.
type KeeperConfig struct {
	// Leases is this worker's view of the lease bucket (required).
	Leases *Leases
	// Sectors is the number of sectors of the world (required).
	Sectors int
	// Every is the time between two rounds (default a quarter of the
	// TTL): each round renews every lease held, so a lease survives
	// three missed rounds at most.
	Every time.Duration
	// OnAcquire is called when this worker claimed a sector: start it. It
	// runs on the keeper's goroutine and must not block for long.
	OnAcquire func(Lease)
	// OnLose is called when this worker must stop a sector at once: a
	// renewal failed (err says why), or the sector belongs to another
	// live worker now (err is nil; the keeper releases the lease after
	// OnLose returned), or the keeper stops. OnLose must stop the sector
	// before it returns. In a hand-over and at a stop, Valid stays true
	// during OnLose (within three quarters of a TTL of the last renewal),
	// so that the sector's last writes still go out; after a failed
	// renewal it is false.
	OnLose func(lease Lease, err error)
	// Logger receives the keeper's messages (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the keeper's clock (nil: time.Now).
	Now func() time.Time
}

// Keeper keeps the sectors this worker should own, and only those: every
// round it registers the worker as live, renews the leases it holds
// (stopping a sector whose renewal fails, or that it could not renew for
// three quarters of a TTL), assigns the sectors over the live workers (Assign), claims
// the free ones assigned to it and hands back the ones assigned to another
// live worker.
type Keeper struct {
	cfg KeeperConfig
	log *slog.Logger

	mu      sync.Mutex
	held    map[uint32]*heldLease
	workers []string
}

type heldLease struct {
	lease   Lease
	renewed time.Time // last successful claim or renewal
}

// NewKeeper returns a keeper; Run runs it.
func NewKeeper(cfg KeeperConfig) (*Keeper, error) {
	if cfg.Leases == nil || cfg.Sectors <= 0 {
		return nil, errors.New("natsworld: keeper: leases and a number of sectors are required")
	}
	if cfg.Every == 0 {
		cfg.Every = cfg.Leases.TTL() / 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Keeper{cfg: cfg, log: cfg.Logger.With("worker", cfg.Leases.Worker()), held: map[uint32]*heldLease{}}, nil
}

// Run runs rounds until ctx ends; then it stops every sector it holds
// (OnLose with ctx's error) and releases their leases and its
// registration, so that the other workers take over at once.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.Every)
	defer t.Stop()
	stopWatch := k.cfg.Leases.WatchWorkers(ctx)
	defer stopWatch()
	for {
		k.Round(ctx)
		select {
		case <-ctx.Done():
			k.releaseAll(ctx.Err())
			return ctx.Err()
		case <-t.C:
		}
	}
}

// releaseAll stops and releases every lease held (a clean stop).
func (k *Keeper) releaseAll(cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Leases.TTL())
	defer cancel()
	for _, h := range k.Held() {
		h = k.renewBeforeStop(ctx, h)
		k.stop(h, cause)
		if err := k.cfg.Leases.Release(ctx, h); err != nil {
			k.log.Warn("release at stop", "sector", h.Sector, "err", err)
		}
	}
	if err := k.cfg.Leases.Deregister(ctx); err != nil {
		k.log.Warn("deregister", "err", err)
	}
}

// Held returns the leases held, by sector.
func (k *Keeper) Held() []Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Lease, 0, len(k.held))
	for _, h := range k.held {
		out = append(out, h.lease)
	}
	slices.SortFunc(out, func(a, b Lease) int { return int(a.Sector) - int(b.Sector) })
	return out
}

// Valid reports whether this worker holds sector's lease at epoch and
// renewed it less than three quarters of a TTL ago (by the keeper's
// clock, counted from when the renewal was sent): what a
// sector's outputs that bypass the log (its snapshots in the shared
// store, its frames) check before they leave, so that a worker that was
// paused past its lease (SIGSTOP) writes nothing on waking, even before
// its next round stops the sector.
func (k *Keeper) Valid(sector uint32, epoch uint64) bool {
	k.mu.Lock()
	h := k.held[sector]
	ok := h != nil && h.lease.Epoch == epoch && k.cfg.Now().Sub(h.renewed) < k.cfg.Leases.TTL()*3/4
	k.mu.Unlock()
	return ok
}

// Workers returns the live workers of the last round.
func (k *Keeper) Workers() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.workers)
}

// renewBeforeStop renews a lease about to be handed over or released, so
// that the sector's last writes (stop) have most of a TTL to go out under
// it on a loaded machine, and returns it as renewed (unchanged if the
// renewal failed: Valid then runs out as it would have).
func (k *Keeper) renewBeforeStop(ctx context.Context, lease Lease) Lease {
	sent := k.cfg.Now()
	octx, cancel := k.opCtx(ctx)
	renewed := lease
	err := k.cfg.Leases.Renew(octx, &renewed)
	cancel()
	if err != nil {
		return lease
	}
	k.mu.Lock()
	if h := k.held[lease.Sector]; h != nil && h.lease.Epoch == lease.Epoch {
		h.lease, h.renewed = renewed, sent
	}
	k.mu.Unlock()
	return renewed
}

// stop stops a sector whose lease this worker still holds and is about
// to release (a hand-over, a clean stop): OnLose runs while Valid still
// says so (up to three quarters of a TTL after the last renewal), so that
// the stopping sector's last writes (its lineage) go out under its lease;
// then the lease is forgotten.
func (k *Keeper) stop(l Lease, cause error) {
	if k.cfg.OnLose != nil {
		k.cfg.OnLose(l, cause)
	}
	k.mu.Lock()
	if h := k.held[l.Sector]; h != nil && h.lease.Epoch == l.Epoch {
		delete(k.held, l.Sector)
	}
	k.mu.Unlock()
}

// lose forgets a lease this worker no longer holds (or may not: a renewal
// failed), then stops its sector: Valid is false from the start.
func (k *Keeper) lose(l Lease, err error) {
	k.mu.Lock()
	delete(k.held, l.Sector)
	k.mu.Unlock()
	if k.cfg.OnLose != nil {
		k.cfg.OnLose(l, err)
	}
}

// opCtx bounds one KV operation to a third of the TTL, so that a slow
// NATS cannot keep a round going past the leases.
func (k *Keeper) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, k.cfg.Leases.TTL()/3)
}

// Round runs one round (Run calls it every KeeperConfig.Every).
func (k *Keeper) Round(ctx context.Context) {
	l := k.cfg.Leases
	ttl := l.TTL()
	// Renew first, all at once: that is what keeps the sectors alive.
	type renewal struct {
		hl         *heldLease
		lease      Lease
		sent, done time.Time
		err        error
	}
	held := k.Held()
	results := make([]renewal, len(held))
	var wg sync.WaitGroup
	for i, h := range held {
		k.mu.Lock()
		hl := k.held[h.Sector]
		k.mu.Unlock()
		if hl == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease := h
			// The lease runs one TTL from when the server applied the
			// renewal, which is after this moment: count from here (a
			// reply that arrives late, say after a SIGSTOP, must not look
			// fresh).
			sent := k.cfg.Now()
			octx, cancel := context.WithTimeout(ctx, ttl/2)
			err := l.Renew(octx, &lease)
			cancel()
			results[i] = renewal{hl: hl, lease: lease, sent: sent, done: k.cfg.Now(), err: err}
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.hl == nil {
			continue
		}
		h, hl, err, now := r.lease, r.hl, r.err, r.done
		switch {
		case err == nil:
			k.mu.Lock()
			hl.lease, hl.renewed = r.lease, r.sent
			k.mu.Unlock()
		case errors.Is(err, ErrLost):
			k.log.Warn("lease lost: stopping the sector", "sector", h.Sector, "epoch", h.Epoch, "err", err)
			k.lose(hl.lease, err)
		case now.Sub(hl.renewed) >= ttl*3/4:
			// Unknown outcome, and three quarters of the lease gone: stop
			// before the lease can lapse under a running sector.
			k.log.Warn("cannot renew the lease: stopping the sector", "sector", h.Sector, "epoch", h.Epoch, "err", err)
			k.lose(hl.lease, fmt.Errorf("no renewal for %v: %w", now.Sub(hl.renewed).Round(time.Millisecond), err))
		default:
			k.log.Warn("renew failed; retrying", "sector", h.Sector, "err", err)
		}
	}
	octx, cancel := k.opCtx(ctx)
	err := l.Register(octx)
	cancel()
	if err != nil {
		k.log.Warn("register", "err", err)
		return
	}
	octx, cancel = k.opCtx(ctx)
	workers, err := l.Workers(octx)
	cancel()
	if err != nil {
		k.log.Warn("live workers", "err", err)
		return
	}
	if !slices.Contains(workers, l.Worker()) {
		workers = append(workers, l.Worker()) // registered just now
		slices.Sort(workers)
	}
	k.mu.Lock()
	k.workers = workers
	k.mu.Unlock()
	for s := range uint32(k.cfg.Sectors) {
		if ctx.Err() != nil {
			return
		}
		want := Assign(l.cfg.World, s, workers) == l.Worker()
		k.mu.Lock()
		h := k.held[s]
		k.mu.Unlock()
		switch {
		case h != nil && !want:
			k.log.Info("sector assigned to another worker: handing it over", "sector", s, "epoch", h.lease.Epoch,
				"to", Assign(l.cfg.World, s, workers))
			lease := k.renewBeforeStop(ctx, h.lease)
			k.stop(lease, nil)
			octx, cancel := k.opCtx(ctx)
			if err := l.Release(octx, lease); err != nil {
				k.log.Warn("release", "sector", s, "err", err)
			}
			cancel()
		case h == nil && want:
			sent := k.cfg.Now()
			octx, cancel := k.opCtx(ctx)
			lease, err := l.Claim(octx, s)
			cancel()
			if errors.Is(err, ErrHeld) {
				continue // its owner hands it over, or its lease lapses
			}
			if err != nil {
				k.log.Warn("claim", "sector", s, "err", err)
				continue
			}
			k.mu.Lock()
			k.held[s] = &heldLease{lease: lease, renewed: sent}
			k.mu.Unlock()
			k.log.Info("claimed sector", "sector", s, "epoch", lease.Epoch)
			if k.cfg.OnAcquire != nil {
				k.cfg.OnAcquire(lease)
			}
		}
	}
}
