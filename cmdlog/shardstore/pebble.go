package shardstore

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/internal/pebbledb"
)

// ErrClosed is returned by the methods of a Pebble store after Close.
var ErrClosed = errors.New("shardstore: store is closed")

// Durability says when Apply returns relative to the disk.
type Durability uint8

const (
	// SyncWrites (the default) is the `fsync` durability mode: Apply returns
	// once the batch is in Pebble's memtable and its write-ahead log has been
	// fsynced (concurrent Applies share one fsync: group commit). Everything
	// Apply returned from survives a process crash, a kernel crash and a power
	// loss, provided the device honours fsync. A shard acknowledges a Store
	// only after Apply returns, so this is the mode that upholds the log's
	// guarantees on its own.
	SyncWrites Durability = iota
	// NoSyncWrites is the `memory` durability mode used by benchmarks: Apply
	// returns once the batch is in the memtable (visible to Get and Scan) and
	// appended to the write-ahead log's buffer in this process; it has not
	// even been handed to the operating system. A process crash (SIGKILL), a
	// kernel crash or a power loss loses the batches applied since the last
	// point of durability. Batches are lost whole and from the end: after a
	// crash the store holds the state after some prefix of the Applies,
	// including every Apply that returned before the last point of
	// durability, which is a synced Apply, a call to Sync, or a clean Close.
	// In practice the loss is bounded by Pebble's log writer: it hands the
	// log to the OS in 32 KiB blocks as they fill (so a process crash loses
	// about the last partial block and any blocks still queued), and syncs
	// a log when it moves to a new one at each memtable rotation (so an OS
	// crash loses about a memtable's worth, MemTableSize, at most).
	NoSyncWrites
)

func (d Durability) String() string {
	switch d {
	case SyncWrites:
		return "sync"
	case NoSyncWrites:
		return "nosync"
	}
	return fmt.Sprintf("Durability(%d)", uint8(d))
}

// Options configures a Pebble store. The zero value is a synced store on
// the operating system's file system with Pebble's default sizes.
type Options struct {
	// Durability says when Apply returns; default SyncWrites.
	Durability Durability
	// FS is the file system; nil means vfs.Default (the OS). Tests pass
	// vfs.NewMem() or vfs.NewCrashableMem().
	FS vfs.FS
	// CacheSize is the block cache size in bytes; 0 means Pebble's default
	// (8 MiB).
	CacheSize int64
	// MemTableSize is the memtable size in bytes; 0 means Pebble's default
	// (4 MiB). Smaller values flush to sstables sooner.
	MemTableSize uint64
	// Logger receives Pebble's log messages (informational ones at debug
	// level); nil means slog.Default(). When
	// Pebble reports a fatal error (for example, its write-ahead log could
	// not be written, after which it cannot know what is durable), the
	// message is logged at error level and the process exits with status 1,
	// as Pebble's own default logger does: continuing could acknowledge
	// writes that are lost.
	Logger *slog.Logger
}

// Pebble is a shard.Storage on a Pebble database in one directory.
//
// Keys are a one-byte prefix and, for entries, the big-endian position, so
// a Scan is one bounded forward iteration. An entry's value is
//
//	crc32c | uvarint client | uvarint seq | data
//
// where the CRC32C covers the position and the rest of the value; it is
// verified on every read, and a mismatch is reported as an error wrapping
// ErrCorrupt. DeleteAbove and TrimTo are range deletions: keep them large
// and infrequent (many small range deletions slow iteration down).
//
// Pebble is safe for concurrent use. Close waits for the calls in progress;
// calls after it return ErrClosed.
type Pebble struct {
	db        *pebbledb.DB
	writeOpts *pebble.WriteOptions // pebble.Sync or pebble.NoSync
	dir       string
	fs        vfs.FS // as passed in Options (nil: the OS)

	mu        sync.Mutex
	idle      sync.Cond // signalled when inflight drops (Close, reopen) and when a reopen ends
	inflight  int
	closed    bool
	reopening bool
}

// beginWrite acquires the store for a write. After a failed write Pebble
// cannot write again in place (see pebbledb.DB), so the first write after
// one waits for every other user to leave and reopens the database: the
// shard node retries the writes that failed, and Set and DeleteRange with
// the same keys and values are idempotent, so a retry loses nothing.
func (p *Pebble) beginWrite() error {
	if err := p.acquire(); err != nil {
		return err
	}
	if p.db.Failed() == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.reopening {
		p.idle.Wait()
	}
	if p.db.Failed() == nil {
		return nil
	}
	p.reopening = true
	for p.inflight > 1 {
		p.idle.Wait()
	}
	err := p.db.Reopen()
	p.reopening = false
	p.idle.Broadcast()
	if err != nil {
		p.inflight--
		return fmt.Errorf("reopen after a failed write: %w", err)
	}
	return nil
}

var _ shard.Storage = (*Pebble)(nil)

// Open opens the store in dir, creating it if needed.
func Open(dir string, opts Options) (*Pebble, error) {
	var writeOpts *pebble.WriteOptions
	switch opts.Durability {
	case SyncWrites:
		writeOpts = pebble.Sync
	case NoSyncWrites:
		writeOpts = pebble.NoSync
	default:
		return nil, fmt.Errorf("shardstore: open %s: unknown durability %v", dir, opts.Durability)
	}
	db, err := pebbledb.Open(dir, pebbledb.Options{FS: opts.FS, Logger: opts.Logger, Component: "pebble",
		CacheSize: opts.CacheSize, MemTableSize: opts.MemTableSize})
	if err != nil {
		return nil, fmt.Errorf("shardstore: open %s: %w", dir, err)
	}
	if err := upgradeFormat(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("shardstore: open %s: %w", dir, err)
	}
	if err := db.CheckFormat(keyFormat, formatVersion, ErrCorrupt); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("shardstore: open %s: %w", dir, err)
	}
	p := &Pebble{db: db, writeOpts: writeOpts, dir: dir, fs: opts.FS}
	p.idle.L = &p.mu
	return p, nil
}

// upgradeFormat moves a store of format 1 to the current format in one
// synced batch: its Meta goes from below the entries to above them (see the
// key layout) and the format marker is rewritten. A crash before the batch
// leaves format 1, which the next Open moves again; other stores are left to
// CheckFormat.
func upgradeFormat(db *pebbledb.DB) error {
	v, closer, err := db.Get(keyFormat)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read format marker: %w", err)
	}
	old := string(v) == formatV1
	_ = closer.Close()
	if !old {
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	meta, closer, err := db.Get(keyMetaV1)
	switch {
	case err == nil:
		// Set copies the value; decodeMeta checks it when it is read.
		err = b.Set(keyMeta, meta, nil)
		_ = closer.Close()
		if err == nil {
			err = b.Delete(keyMetaV1, nil)
		}
	case errors.Is(err, pebble.ErrNotFound):
		err = nil
	}
	if err == nil {
		err = b.Set(keyFormat, []byte(formatVersion), nil)
	}
	if err == nil {
		err = db.Apply(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("move format %q to %q: %w", formatV1, formatVersion, err)
	}
	return nil
}

// acquire registers a call in progress; it fails once Close has begun.
func (p *Pebble) acquire() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.reopening {
		p.idle.Wait()
	}
	if p.closed {
		return ErrClosed
	}
	p.inflight++
	return nil
}

func (p *Pebble) release() {
	p.mu.Lock()
	p.inflight--
	if (p.closed && p.inflight == 0) || (p.reopening && p.inflight == 1) {
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

// Close waits for calls in progress, then closes the database (a clean
// Close also makes NoSyncWrites batches durable). Calls made after Close
// began, including from a Scan callback, return ErrClosed.
func (p *Pebble) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	for p.inflight > 0 {
		p.idle.Wait()
	}
	p.mu.Unlock()
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("shardstore: close: %w", err)
	}
	return nil
}

// Get returns the entry at pos, if present.
func (p *Pebble) Get(pos uint64) (msg.Entry, bool, error) {
	if err := p.acquire(); err != nil {
		return msg.Entry{}, false, fmt.Errorf("shardstore: get %d: %w", pos, err)
	}
	defer p.release()
	v, closer, err := p.db.Get(entryKey(pos))
	if errors.Is(err, pebble.ErrNotFound) {
		return msg.Entry{}, false, nil
	}
	if err != nil {
		return msg.Entry{}, false, fmt.Errorf("shardstore: get %d: %w", pos, err)
	}
	defer closer.Close()
	e, err := decodeEntry(pos, v)
	if err != nil {
		return msg.Entry{}, false, fmt.Errorf("shardstore: get %d: %w", pos, err)
	}
	return e, true, nil
}

// Scan calls fn for present entries with from <= Pos <= to in ascending order
// until fn returns false. It reads one consistent snapshot: Applies made
// while it runs (by fn or anyone else) are not visited.
func (p *Pebble) Scan(from, to uint64, fn func(msg.Entry) bool) (err error) {
	if from > to {
		return nil
	}
	if err := p.acquire(); err != nil {
		return fmt.Errorf("shardstore: scan %d..%d: %w", from, to, err)
	}
	defer p.release()
	it, err := p.db.NewIter(&pebble.IterOptions{
		LowerBound: entryKey(from),
		UpperBound: entryUpperBound(to),
	})
	if err != nil {
		return fmt.Errorf("shardstore: scan %d..%d: %w", from, to, err)
	}
	defer func() { // deferred so that a panicking fn does not leak the iterator
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("shardstore: scan %d..%d: %w", from, to, cerr)
		}
	}()
	if err := scanIter(it, fn); err != nil {
		return fmt.Errorf("shardstore: scan %d..%d: %w", from, to, err)
	}
	return nil
}

func scanIter(it *pebble.Iterator, fn func(msg.Entry) bool) error {
	for valid := it.First(); valid; valid = it.Next() {
		pos, err := decodeEntryKey(it.Key())
		if err != nil {
			return err
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("entry %d: %w", pos, err)
		}
		e, err := decodeEntry(pos, v)
		if err != nil {
			return err
		}
		if !fn(e) {
			return nil
		}
	}
	return it.Error()
}

// Meta returns the stored Meta (zero value if none was stored).
func (p *Pebble) Meta() (shard.Meta, error) {
	if err := p.acquire(); err != nil {
		return shard.Meta{}, fmt.Errorf("shardstore: meta: %w", err)
	}
	defer p.release()
	v, closer, err := p.db.Get(keyMeta)
	if errors.Is(err, pebble.ErrNotFound) {
		return shard.Meta{}, nil
	}
	if err != nil {
		return shard.Meta{}, fmt.Errorf("shardstore: meta: %w", err)
	}
	defer closer.Close()
	m, err := decodeMeta(v)
	if err != nil {
		return shard.Meta{}, fmt.Errorf("shardstore: meta: %w", err)
	}
	return m, nil
}

// Apply writes w as one Pebble batch (Puts, then DeleteAbove, then TrimTo,
// then Meta, in that order within the batch) and returns when it is as
// durable as Options.Durability says. An empty w does nothing.
func (p *Pebble) Apply(w shard.Writes) error {
	if err := p.beginWrite(); err != nil {
		return fmt.Errorf("shardstore: apply: %w", err)
	}
	defer p.release()
	if w.Empty() {
		return nil
	}
	b := p.db.NewBatch()
	defer b.Close()
	if err := fillBatch(b, &w); err != nil {
		return fmt.Errorf("shardstore: apply: %w", err)
	}
	if err := p.db.Apply(b, p.writeOpts); err != nil {
		return fmt.Errorf("shardstore: apply: %w", err)
	}
	return nil
}

// ApplyAll writes every Writes of ws, in order, as one Pebble batch, and
// returns when it is as durable as Options.Durability says: one sync for
// the lot (a shard's round of steps is group-committed). The result is what
// applying each in turn would give; a crash keeps all of it or none.
func (p *Pebble) ApplyAll(ws []shard.Writes) error { return p.applyBatch(ws, p.writeOpts) }

var _ shard.BatchApplier = (*Pebble)(nil)

// ApplyLazy writes ws as one batch without syncing it (shard.Writes.Lazy):
// it becomes durable with the next synced batch.
func (p *Pebble) ApplyLazy(ws []shard.Writes) error { return p.applyBatch(ws, pebble.NoSync) }

var _ shard.LazyApplier = (*Pebble)(nil)

// applyBatch writes every Writes of ws, in order, as one Pebble batch
// applied with opts.
func (p *Pebble) applyBatch(ws []shard.Writes, opts *pebble.WriteOptions) error {
	if err := p.beginWrite(); err != nil {
		return fmt.Errorf("shardstore: apply: %w", err)
	}
	defer p.release()
	b := p.db.NewBatch()
	defer b.Close()
	for i := range ws {
		if err := fillBatch(b, &ws[i]); err != nil {
			return fmt.Errorf("shardstore: apply: %w", err)
		}
	}
	if b.Empty() {
		return nil
	}
	if err := p.db.Apply(b, opts); err != nil {
		return fmt.Errorf("shardstore: apply: %w", err)
	}
	return nil
}

func fillBatch(b *pebble.Batch, w *shard.Writes) error {
	var val []byte
	for _, e := range w.Puts {
		val = appendEntryValue(val[:0], e)
		if err := b.Set(entryKey(e.Pos), val, nil); err != nil { // Set copies key and value
			return fmt.Errorf("put %d: %w", e.Pos, err)
		}
	}
	if w.HasDeleteAbove && w.DeleteAbove < math.MaxUint64 {
		if err := b.DeleteRange(entryKey(w.DeleteAbove+1), keyEntriesEnd, nil); err != nil {
			return fmt.Errorf("delete above %d: %w", w.DeleteAbove, err)
		}
	}
	if w.TrimTo > 0 {
		if err := b.DeleteRange([]byte{prefixEntry}, entryUpperBound(w.TrimTo), nil); err != nil {
			return fmt.Errorf("trim to %d: %w", w.TrimTo, err)
		}
	}
	if w.Meta != nil {
		if err := b.Set(keyMeta, encodeMeta(*w.Meta), nil); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
	}
	return nil
}

// Sync makes every batch applied so far durable (a no-op in effect under
// SyncWrites). NoSyncWrites users call it to bound what a crash can lose.
func (p *Pebble) Sync() error {
	if err := p.acquire(); err != nil {
		return fmt.Errorf("shardstore: sync: %w", err)
	}
	defer p.release()
	if err := p.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("shardstore: sync: %w", err)
	}
	return nil
}
