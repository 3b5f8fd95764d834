package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/replay/table"
	"github.com/klauspost/compress/zstd"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Store keeps the snapshots (required).
	Store Store
	// Shard is the shard whose snapshots the writer stores.
	Shard uint32
	// Codec compresses; nil gives the writer its own at
	// zstd.SpeedFastest.
	Codec *Codec
	// Buffers is the number of capture buffers (default 2): at most that
	// many captures are in the writer's hands at once; while all are, the
	// tick loop skips capturing (its dirty bits accumulate).
	Buffers int
	// KeepChains is the number of complete chains kept (default 2: the
	// newest and one fallback); older snapshots are deleted.
	KeepChains int
	// PruneEvery is the number of new bases between deletions (default 8),
	// so that deletions are large and infrequent range deletions.
	PruneEvery int
	// OnStored, if set, is called from the writer's goroutine after each
	// snapshot is stored or dropped.
	OnStored func(Stored)
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
}

// Job is one capture handed to the writer.
type Job struct {
	// Meta describes the capture: Shard, Tick, Pos, Hash, OutputSeq and
	// Full are the caller's; the writer fills in the chain fields, Epoch,
	// SetHash and the sizes.
	Meta Meta
	// Capture is a buffer obtained from Writer.Buffer and filled by
	// table.Set.CaptureInto.
	Capture *table.SetCapture
	// Ready, if set, blocks until the snapshot may be stored: until every
	// output the shard produced through Meta.Tick is durable in the log, so
	// that recovering from this snapshot never loses an output.
	Ready func(context.Context) error
}

// Stored reports the outcome of one Job.
type Stored struct {
	// Meta is the stored snapshot's metadata (as far as known on error).
	Meta Meta
	// Encode is the time spent encoding and compressing, Put the time the
	// store took.
	Encode, Put time.Duration
	// Err is set if the snapshot was not stored; the chain is then broken
	// and the next capture must be full.
	Err error
}

// ErrChainBroken is reported for deltas dropped because an earlier snapshot
// of their chain was not stored.
var ErrChainBroken = errors.New("snapshot: chain broken")

// Writer compresses and stores a shard's captures in the background, in
// submission order, keeping track of the chain (base and deltas) they form.
// Buffer, Submit, NeedFull and Flush may be called from the tick loop while
// Run runs in its own goroutine.
type Writer struct {
	cfg   WriterConfig
	codec *Codec
	jobs  chan Job
	free  chan *table.SetCapture

	broken    atomic.Bool
	submitted atomic.Uint64
	done      progress

	// Owned by Run.
	tip               *Meta
	bases             []uint64
	raw, blob, packed []byte
}

// NewWriter returns a writer; call Continue (if the shard was restored) and
// then Run.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("snapshot: writer for shard %d: no store", cfg.Shard)
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = 2
	}
	if cfg.KeepChains <= 0 {
		cfg.KeepChains = 2
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	codec := cfg.Codec
	if codec == nil {
		var err error
		if codec, err = NewCodec(zstd.SpeedFastest); err != nil {
			return nil, err
		}
	}
	w := &Writer{cfg: cfg, codec: codec, jobs: make(chan Job, cfg.Buffers), free: make(chan *table.SetCapture, cfg.Buffers)}
	for range cfg.Buffers {
		w.free <- new(table.SetCapture)
	}
	w.done.init()
	w.broken.Store(true) // no chain yet: the first capture must be full
	return w, nil
}

// Continue makes the writer extend the chain ending at tip (the snapshot
// the shard was restored from): the next delta's predecessor. Call it
// before Run.
func (w *Writer) Continue(tip Meta) {
	w.tip = &tip
	w.bases = []uint64{tip.Base}
	w.broken.Store(false)
}

// NeedFull reports whether the next capture must be a full one: there is
// no chain yet, or a snapshot of the chain could not be stored.
func (w *Writer) NeedFull() bool { return w.broken.Load() }

// Buffer returns a free capture buffer, or nil if all are in use (then the
// caller skips capturing this tick).
func (w *Writer) Buffer() *table.SetCapture {
	select {
	case b := <-w.free:
		return b
	default:
		return nil
	}
}

// Submit hands a filled buffer to the writer. It never blocks: there are
// never more jobs than buffers. A full job clears NeedFull.
func (w *Writer) Submit(j Job) {
	if j.Meta.Full {
		w.broken.Store(false)
	}
	w.submitted.Add(1)
	w.jobs <- j
}

// Flush waits until every job submitted before the call is stored or
// dropped.
func (w *Writer) Flush(ctx context.Context) error {
	return w.done.wait(ctx, w.submitted.Load())
}

// Run stores submitted captures until ctx ends; jobs still queued then are
// dropped (as a crash would lose them).
func (w *Writer) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case j := <-w.jobs:
			w.handle(ctx, j)
			w.free <- j.Capture
			w.done.advance(1)
		}
	}
}

// Drain stores the jobs submitted so far, in order, on the caller's
// goroutine: it is Run for a caller that runs no goroutine for the writer
// (a synchronous replay.Runner). If ctx ends first it returns ctx.Err() and
// leaves the rest queued; a writer is either Run or drained, never both.
func (w *Writer) Drain(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case j := <-w.jobs:
			w.handle(ctx, j)
			w.free <- j.Capture
			w.done.advance(1)
		default:
			return nil
		}
	}
}

func (w *Writer) handle(ctx context.Context, j Job) {
	m := j.Meta
	m.Shard = w.cfg.Shard
	st := Stored{Meta: m}
	report := func() {
		if st.Err != nil && ctx.Err() == nil {
			w.tip = nil
			w.broken.Store(true)
			if !errors.Is(st.Err, ErrChainBroken) {
				w.cfg.Logger.Warn("snapshot not stored", "shard", w.cfg.Shard, "tick", m.Tick, "err", st.Err)
			}
		}
		if w.cfg.OnStored != nil {
			w.cfg.OnStored(st)
		}
	}
	epoch, err := CaptureEpoch(j.Capture)
	if err != nil {
		st.Err = err
		report()
		return
	}
	m.Epoch, m.SetHash = epoch, j.Capture.Hash
	if m.Full != j.Capture.Full {
		st.Err = fmt.Errorf("snapshot: shard %d tick %d: job full=%v, capture full=%v", m.Shard, m.Tick, m.Full, j.Capture.Full)
		report()
		return
	}
	if m.Full {
		m.Base, m.Prev, m.ChainLen = m.Tick, 0, 1
	} else {
		if w.tip == nil || w.tip.Epoch+1 != epoch || w.tip.Tick >= m.Tick || w.tip.ChainLen >= MaxChainLen {
			st.Err = ErrChainBroken
			report()
			return
		}
		m.Base, m.Prev, m.ChainLen = w.tip.Base, w.tip.Tick, w.tip.ChainLen+1
	}
	start := time.Now()
	if w.raw, err = j.Capture.AppendBinary(w.raw[:0]); err != nil {
		st.Err = fmt.Errorf("snapshot: shard %d tick %d: encode: %w", m.Shard, m.Tick, err)
		report()
		return
	}
	if !m.Full {
		m.ChainRawBytes = w.tip.ChainRawBytes + uint64(len(w.raw))
	}
	w.blob, m, w.packed, err = w.codec.Encode(w.blob[:0], m, w.raw, w.packed)
	st.Meta, st.Encode = m, time.Since(start)
	if err != nil {
		st.Err = err
		report()
		return
	}
	if j.Ready != nil {
		if err := j.Ready(ctx); err != nil {
			st.Err = fmt.Errorf("snapshot: shard %d tick %d: waiting for outputs: %w", m.Shard, m.Tick, err)
			report()
			return
		}
	}
	start = time.Now()
	err = w.cfg.Store.Put(ctx, m, w.blob)
	st.Put = time.Since(start)
	if err != nil {
		st.Err = fmt.Errorf("snapshot: shard %d tick %d: %w", m.Shard, m.Tick, err)
		report()
		return
	}
	w.tip = &m
	if m.Full {
		w.bases = append(w.bases, m.Tick)
		w.prune(ctx)
	}
	report()
}

// prune deletes the snapshots older than the KeepChains newest bases, once
// PruneEvery new bases have accumulated.
func (w *Writer) prune(ctx context.Context) {
	keep := w.cfg.KeepChains
	if len(w.bases) < keep+w.cfg.PruneEvery {
		return
	}
	oldest := w.bases[len(w.bases)-keep]
	if err := w.cfg.Store.DeleteRange(ctx, w.cfg.Shard, 0, oldest); err != nil {
		w.cfg.Logger.Warn("old snapshots not deleted", "shard", w.cfg.Shard, "before", oldest, "err", err)
		return
	}
	w.bases = append(w.bases[:0], w.bases[len(w.bases)-keep:]...)
}

// progress is a counter that goroutines can wait on.
type progress struct {
	mu sync.Mutex
	n  uint64
	ch chan struct{}
}

func (p *progress) init() { p.ch = make(chan struct{}) }

func (p *progress) advance(d uint64) {
	p.mu.Lock()
	p.n += d
	close(p.ch)
	p.ch = make(chan struct{})
	p.mu.Unlock()
}

func (p *progress) wait(ctx context.Context, target uint64) error {
	for {
		p.mu.Lock()
		n, ch := p.n, p.ch
		p.mu.Unlock()
		if n >= target {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
