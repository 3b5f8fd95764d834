// Package natsworld holds the NATS adapters of a world spread over
// processes: sector leases in a JetStream KV bucket (Leases), the fencing
// epochs they hand out, the registry of live sector workers and the
// deterministic assignment of sectors to them (Assign, Keeper). It is the
// only package under replay/world that links NATS; world itself does not.
//
// A lease is one key per sector ("s.<world>.<sector>") in a bucket whose
// TTL (the stream's max age) is the lease length: a key not rewritten
// within the TTL disappears, and another worker may then create it. The
// owner renews by Update with the revision it last wrote (compare-and-set),
// so a worker that was paused past the TTL (SIGSTOP, a long GC, a
// partition) finds its renewal refused and must stop the sector. Per-key
// TTLs are not used: Update resets them, so a renewal would drop the TTL.
//
// The fencing epoch of a lease is the KV revision of the write that
// claimed it (Create). Revisions only grow, so a later claim of a sector
// always has a higher epoch than every earlier one; renewals keep the
// epoch (the value carries it) while the revision moves on.
package natsworld

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the KV bucket of sector leases when LeasesConfig.Bucket
// is empty.
const DefaultBucket = "broadside-sectors"

// DefaultTTL is the default lease length: a dead worker's sectors are free
// this long after its last renewal.
const DefaultTTL = 300 * time.Millisecond

// TickerBucket is the bucket of the world's Ticker lease when it has its
// own (OpenTickerLeases), and DefaultTickerTTL that lease's length.
//
// The Ticker's lease may be shorter than a sector's (sector
// --ticker-lease-ttl when the bucket is created): a Ticker that overlaps
// its successor is harmless to the world's state (every tick marker has a
// deterministic id, so the log stores each tick once however many
// Tickers append it), whereas every sector stops while nobody ticks. But
// on a loaded machine a short lease flaps, and two Tickers out of phase
// make the ticks irregular: at 100 ms and a load average of 20 on 2 cores
// the lease changed hands every few seconds and the quiet tick interval's
// p50 fell to 4 ms (catch-up bursts). So the default stays the sectors'.
const (
	TickerBucket     = "broadside-ticker"
	DefaultTickerTTL = DefaultTTL
)

// OpenTickerLeases opens (creating if needed) the Ticker's lease bucket
// as worker sees it: cfg with Bucket TickerBucket and TTL
// DefaultTickerTTL unless set.
func OpenTickerLeases(ctx context.Context, js jetstream.JetStream, cfg LeasesConfig) (*Leases, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = TickerBucket
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTickerTTL
	}
	return OpenLeases(ctx, js, cfg)
}

// Errors callers branch on.
var (
	// ErrHeld is returned by Claim when another worker holds the lease.
	ErrHeld = errors.New("natsworld: lease held by another worker")
	// ErrLost is returned by Renew and Release when the lease is no longer
	// this worker's (it expired, and maybe another worker claimed it).
	ErrLost = errors.New("natsworld: lease lost")
)

// LeasesConfig configures Leases.
type LeasesConfig struct {
	// Bucket is the KV bucket (default DefaultBucket). One bucket serves
	// many worlds.
	Bucket string
	// World is the world id (required, not 0).
	World uint32
	// Worker is this worker's id: letters, digits, '-' and '_' (required).
	Worker string
	// TTL is the lease length, the bucket's max age when OpenLeases
	// creates it (default DefaultTTL). An existing bucket keeps its own.
	TTL time.Duration
	// Replicas is the bucket's replication factor when OpenLeases creates
	// it: 1 (default) for one server, 3 for a NATS cluster.
	Replicas int
}

// Lease is a sector lease this worker holds.
type Lease struct {
	// Sector is the leased sector.
	Sector uint32
	// Epoch is the lease's fencing epoch (the revision of its claim).
	Epoch uint64
	// Revision is the KV revision of the last write (claim or renewal);
	// the next renewal expects it.
	Revision uint64
}

// Leases claims, renews and releases sector leases of one world for one
// worker, and registers the worker as live. It is safe for concurrent use
// (each call is one KV operation).
type Leases struct {
	kv     jetstream.KeyValue
	cfg    LeasesConfig
	regRev uint64 // revision of this worker's registration; used by Register only
	// watch, while WatchWorkers runs, holds the registrations it saw.
	watch atomic.Pointer[workerWatch]
}

// workerWatch is the registrations a watcher delivered: worker id -> the
// server time of its last registration.
type workerWatch struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	ready bool // every registration current at the start was delivered
}

var validWorker = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,64}$`)

// OpenLeases returns the leases of cfg.World for cfg.Worker in js,
// creating the bucket if it does not exist.
func OpenLeases(ctx context.Context, js jetstream.JetStream, cfg LeasesConfig) (*Leases, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	switch {
	case cfg.World == 0:
		return nil, errors.New("natsworld: world 0")
	case !validWorker.MatchString(cfg.Worker):
		return nil, fmt.Errorf("natsworld: worker id %q: want 1 to 64 letters, digits, '-' or '_'", cfg.Worker)
	case cfg.TTL < 10*time.Millisecond:
		return nil, fmt.Errorf("natsworld: lease TTL %v is too short", cfg.TTL)
	case cfg.Replicas < 1 || cfg.Replicas > 5:
		return nil, fmt.Errorf("natsworld: %d replicas, want 1..5", cfg.Replicas)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: cfg.Bucket, Description: "Broadside sector leases and live sector workers",
			History: 1, TTL: cfg.TTL, Replicas: cfg.Replicas, Storage: jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsworld: lease bucket %s: %w", cfg.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsworld: lease bucket %s: %w", cfg.Bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, fmt.Errorf("natsworld: lease bucket %s has no TTL: its leases would never expire", cfg.Bucket)
	}
	cfg.TTL = st.TTL()
	return &Leases{kv: kv, cfg: cfg}, nil
}

// TTL returns the lease length (the bucket's max age).
func (l *Leases) TTL() time.Duration { return l.cfg.TTL }

// Worker returns this worker's id.
func (l *Leases) Worker() string { return l.cfg.Worker }

func (l *Leases) sectorKey(sector uint32) string {
	return "s." + strconv.FormatUint(uint64(l.cfg.World), 10) + "." + strconv.FormatUint(uint64(sector), 10)
}

func (l *Leases) workerPrefix() string {
	return "w." + strconv.FormatUint(uint64(l.cfg.World), 10) + "."
}

// Claim takes sector's lease if nobody holds it; it returns ErrHeld if
// someone (this worker included) does.
//
// A lease whose last write is older than the TTL (and a margin) has
// expired even if the server has not removed it yet (nats-server's file
// store checks ages at most every 250 ms): Claim deletes it, expecting
// its revision (so a renewal meanwhile wins), and claims. The age is the
// server's write time against this worker's clock; the margin
// (ExpiryMargin of the TTL) covers clock skew, and the previous holder
// stopped using the lease three quarters of a TTL after its last renewal anyway.
func (l *Leases) Claim(ctx context.Context, sector uint32) (Lease, error) {
	key := l.sectorKey(sector)
	// The epoch is the revision of this write, unknown before it: the
	// value says 0, which reads as "the entry's own revision".
	val := EncodeLeaseValue(LeaseValue{Worker: l.cfg.Worker})
	rev, err := l.kv.Create(ctx, key, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = l.claimExpired(ctx, key, val)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, ErrHeld) {
		return Lease{}, fmt.Errorf("natsworld: claim sector %d: %w", sector, ErrHeld)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("natsworld: claim sector %d: %w", sector, err)
	}
	return Lease{Sector: sector, Epoch: rev, Revision: rev}, nil
}

// ExpiryMargin is the share of the TTL past which Claim takes a lease
// the server has not removed yet.
const ExpiryMargin = 0.25

// claimExpired claims key if its last write is older than the TTL and
// the margin; ErrHeld otherwise.
func (l *Leases) claimExpired(ctx context.Context, key string, val []byte) (uint64, error) {
	e, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return l.kv.Create(ctx, key, val) // removed meanwhile
	}
	if err != nil {
		return 0, err
	}
	if time.Since(e.Created()) <= l.cfg.TTL+time.Duration(float64(l.cfg.TTL)*ExpiryMargin) {
		return 0, ErrHeld
	}
	if err := l.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, ErrHeld // renewed or claimed meanwhile
		}
		return 0, err
	}
	return l.kv.Create(ctx, key, val)
}

// Renew extends lease by one TTL from now and updates its Revision; it
// returns ErrLost if the lease expired or was taken meanwhile. On any
// error the caller must stop the sector: the lease may lapse before it
// can be renewed again.
func (l *Leases) Renew(ctx context.Context, lease *Lease) error {
	rev, err := l.kv.Update(ctx, l.sectorKey(lease.Sector), EncodeLeaseValue(LeaseValue{Worker: l.cfg.Worker, Epoch: lease.Epoch}), lease.Revision)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("natsworld: renew sector %d epoch %d: %w", lease.Sector, lease.Epoch, ErrLost)
	}
	if err != nil {
		return fmt.Errorf("natsworld: renew sector %d epoch %d: %w", lease.Sector, lease.Epoch, err)
	}
	lease.Revision = rev
	return nil
}

// Release gives lease up at once (the sector must be stopped first), so
// that another worker can claim it without waiting for the TTL.
func (l *Leases) Release(ctx context.Context, lease Lease) error {
	err := l.kv.Delete(ctx, l.sectorKey(lease.Sector), jetstream.LastRevision(lease.Revision))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("natsworld: release sector %d epoch %d: %w", lease.Sector, lease.Epoch, ErrLost)
	}
	if err != nil {
		return fmt.Errorf("natsworld: release sector %d epoch %d: %w", lease.Sector, lease.Epoch, err)
	}
	return nil
}

// Owner returns the worker holding sector's lease and its epoch, or ""
// if nobody does.
func (l *Leases) Owner(ctx context.Context, sector uint32) (worker string, epoch uint64, err error) {
	e, err := l.kv.Get(ctx, l.sectorKey(sector))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("natsworld: owner of sector %d: %w", sector, err)
	}
	v, err := DecodeLeaseValue(e.Value())
	if err != nil {
		return "", 0, fmt.Errorf("natsworld: owner of sector %d: revision %d: %w", sector, e.Revision(), err)
	}
	if v.Epoch == 0 {
		v.Epoch = e.Revision()
	}
	return v.Worker, v.Epoch, nil
}

// revision returns the KV revision of the last write of sector's lease
// (its claim or latest renewal), 0 if nobody holds it: a Ticker standby
// learns from it whether the lease was written since its bridge began.
func (l *Leases) revision(ctx context.Context, sector uint32) (uint64, error) {
	e, err := l.kv.Get(ctx, l.sectorKey(sector))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("natsworld: lease of sector %d: %w", sector, err)
	}
	return e.Revision(), nil
}

// Register records this worker as live for one TTL (call it at least as
// often as the leases are renewed). A registration that lapsed is made
// anew.
func (l *Leases) Register(ctx context.Context) error {
	key := l.workerPrefix() + l.cfg.Worker
	val := []byte(l.cfg.Worker)
	if l.regRev != 0 {
		rev, err := l.kv.Update(ctx, key, val, l.regRev)
		if err == nil {
			l.regRev = rev
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("natsworld: register worker %s: %w", l.cfg.Worker, err)
		}
	}
	rev, err := l.kv.Put(ctx, key, val)
	if err != nil {
		return fmt.Errorf("natsworld: register worker %s: %w", l.cfg.Worker, err)
	}
	l.regRev = rev
	return nil
}

// Deregister removes this worker from the live workers at once (a clean
// stop), so that the others rebalance without waiting for the TTL.
func (l *Leases) Deregister(ctx context.Context) error {
	l.regRev = 0
	if err := l.kv.Delete(ctx, l.workerPrefix()+l.cfg.Worker); err != nil {
		return fmt.Errorf("natsworld: deregister worker %s: %w", l.cfg.Worker, err)
	}
	return nil
}

// WatchWorkers follows the registrations of the world's workers until ctx
// ends or stop is called, so that Workers answers from memory instead of
// listing the bucket (a consumer created on the server) every round. It
// is an optimisation: Workers lists whenever the watch is not running,
// not ready, or has not seen this worker's own latest registration within
// the TTL (a watch that stalled).
func (l *Leases) WatchWorkers(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := l.kv.WatchFiltered(ctx, []string{l.workerPrefix() + "*"})
	if err != nil {
		cancel()
		return func() {}
	}
	ww := &workerWatch{seen: map[string]time.Time{}}
	l.watch.Store(ww)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					l.watch.CompareAndSwap(ww, nil)
					return
				}
				ww.mu.Lock()
				if e == nil {
					ww.ready = true
				} else if id := strings.TrimPrefix(e.Key(), l.workerPrefix()); validWorker.MatchString(id) {
					if e.Operation() == jetstream.KeyValuePut {
						ww.seen[id] = e.Created()
					} else {
						delete(ww.seen, id)
					}
				}
				ww.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
		l.watch.CompareAndSwap(ww, nil)
	}
}

// watched returns the live workers from the watch, if it can answer.
func (l *Leases) watched(limit time.Duration) ([]string, bool) {
	ww := l.watch.Load()
	if ww == nil {
		return nil, false
	}
	ww.mu.Lock()
	defer ww.mu.Unlock()
	if own, ok := ww.seen[l.cfg.Worker]; !ww.ready || !ok || time.Since(own) > limit {
		return nil, false
	}
	var out []string
	for id, at := range ww.seen {
		if time.Since(at) <= limit {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, true
}

// Workers returns the ids of the live workers of the world, sorted: those
// whose registration is younger than the TTL and its margin (an expired
// one the server has not removed yet is left out, as Claim takes such a
// lease).
func (l *Leases) Workers(ctx context.Context) ([]string, error) {
	if out, ok := l.watched(l.cfg.TTL + time.Duration(float64(l.cfg.TTL)*ExpiryMargin)); ok {
		return out, nil
	}
	watcher, err := l.kv.WatchFiltered(ctx, []string{l.workerPrefix() + "*"}, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("natsworld: live workers: %w", err)
	}
	defer watcher.Stop()
	limit := l.cfg.TTL + time.Duration(float64(l.cfg.TTL)*ExpiryMargin)
	var out []string
	for {
		select {
		case e := <-watcher.Updates():
			if e == nil { // every current entry delivered
				slices.Sort(out)
				return slices.Compact(out), nil
			}
			if id := strings.TrimPrefix(e.Key(), l.workerPrefix()); validWorker.MatchString(id) && time.Since(e.Created()) <= limit {
				out = append(out, id)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("natsworld: live workers: %w", ctx.Err())
		}
	}
}

// Assign returns the worker that should own sector among workers (""
// if there are none), by rendezvous hashing: every worker that sees the
// same set of workers computes the same owner, and a worker joining or
// leaving moves only the sectors it wins or held.
func Assign(world, sector uint32, workers []string) string {
	var best string
	var bestScore uint64
	for _, w := range workers {
		h := fnv.New64a()
		var b [8]byte
		binary.BigEndian.PutUint32(b[:4], world)
		binary.BigEndian.PutUint32(b[4:], sector)
		h.Write(b[:])
		h.Write([]byte(w))
		s := mix(h.Sum64())
		if best == "" || s > bestScore || (s == bestScore && w < best) {
			best, bestScore = w, s
		}
	}
	return best
}

// mix is a 64-bit finalizer (splitmix64's): FNV's high bits are weak for
// short inputs that differ at the end.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// LeaseValue is the value of a sector's lease key.
type LeaseValue struct {
	// Worker holds the lease.
	Worker string
	// Epoch is the fencing epoch; 0 in the claim itself, whose revision
	// is the epoch.
	Epoch uint64
}

// Encoded lease value: magic "BSLV" | epoch u64 big-endian | worker id.
const leaseMagic = "BSLV"

// EncodeLeaseValue returns v's encoding.
func EncodeLeaseValue(v LeaseValue) []byte {
	b := append([]byte(leaseMagic), make([]byte, 8)...)
	binary.BigEndian.PutUint64(b[4:], v.Epoch)
	return append(b, v.Worker...)
}

// DecodeLeaseValue decodes a lease key's value. It never panics.
func DecodeLeaseValue(b []byte) (LeaseValue, error) {
	if len(b) < 12 || string(b[:4]) != leaseMagic {
		return LeaseValue{}, fmt.Errorf("natsworld: lease value of %d bytes: not a lease", len(b))
	}
	w := string(b[12:])
	if !validWorker.MatchString(w) {
		return LeaseValue{}, fmt.Errorf("natsworld: lease value: worker id %q", w)
	}
	return LeaseValue{Worker: w, Epoch: binary.BigEndian.Uint64(b[4:12])}, nil
}
