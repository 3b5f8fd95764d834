// Package pebbledb opens the project's Pebble databases (shard stores,
// write-ahead logs, snapshot and lineage stores) one way: the newest
// format, Pebble's messages through log/slog, and on the operating
// system's file system a disk-health check that logs slow operations.
package pebbledb

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// SlowDisk is how long a disk operation may take before it is logged as
// slow (Pebble's default).
const SlowDisk = 5 * time.Second

// Options configure Open. The zero value opens on the operating system's
// file system with Pebble's default sizes, logging to slog.Default().
type Options struct {
	// FS is the file system; nil means the operating system's, with the
	// disk-health check. Tests pass vfs.NewMem() or a crashable one.
	FS vfs.FS
	// Logger receives Pebble's messages (routine ones at debug level) and
	// the slow-disk warnings, with "component" and "dir" attributes; nil
	// means slog.Default().
	Logger *slog.Logger
	// Component names the database's kind in its log messages (for
	// example "snapshot-pebble").
	Component string
	// CacheSize is the block cache size in bytes; 0 means Pebble's
	// default (8 MiB).
	CacheSize int64
	// MemTableSize is the memtable size in bytes; 0 means Pebble's default
	// (4 MiB).
	MemTableSize uint64
}

// DB is an open Pebble database. Close closes it and releases what Open
// made for it.
//
// Writes go through Apply and Set, which turn Pebble's reactions to a
// failed write into errors. Pebble v2.1.7 does not survive a failed WAL
// write or sync in place: a failed synced commit calls Logger.Fatalf
// (our Logger panics with a value Apply recovers), and its WAL writer
// keeps the error, so the next commit panics inside the commit pipeline
// with the pipeline's mutex held (the instance is wedged: even Close
// would block). So after the first write-path error the instance is
// failed: Apply and Set refuse to touch it (returning ErrFailed) until the
// owner calls Reopen, which closes it (or, when wedged, fences it: its
// files refuse every later write, and its lock is released) and opens
// the directory afresh. Only what Pebble synced is durable, so a caller
// that rewrites what failed (the same keys and values) loses nothing.
//
// Pebble also calls Fatalf on its own goroutines when a flush's or a
// compaction's MANIFEST write fails, which a full disk causes as easily as
// a failed commit; a panic there would end the process. Instead the
// instance is given up at once: fenced (none of its background work can
// write or delete a file any more) and failed, so the owner's next write
// reopens the directory; reads meanwhile see what it held before.
type DB struct {
	*pebble.DB
	closeFS func()
	dir     string
	opts    Options
	baseFS  vfs.FS
	g       *guard
	gone    bool // d.DB is closed (Reopen failed to open a successor)

	mu     sync.Mutex // guards failed and wedged (concurrent writers)
	failed error      // first failed write of this instance, or nil
	wedged bool       // the failure left the commit pipeline locked
}

// ErrFailed is wrapped by the errors of writes refused because an earlier
// write of the same instance failed: the database must be reopened.
var ErrFailed = errors.New("pebbledb: an earlier write failed; reopen the database")

// Open opens (creating if needed) the Pebble database in dir. Errors are
// Pebble's; callers add their context.
func Open(dir string, opts Options) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", opts.Component, "dir", dir)
	fs, closer := opts.FS, io.Closer(nil)
	if fs == nil {
		// What Pebble does for a nil FS, except that we own the closer: in
		// pebble v2.1.7 a failed Open leaks the disk-health ticker
		// goroutine of the FS it wrapped itself.
		fs, closer = vfs.WithDiskHealthChecks(vfs.Default, SlowDisk, nil, func(info vfs.DiskSlowInfo) {
			logger.Warn("slow disk", "op", info.String())
		})
	}
	closeFS := func() {
		if closer != nil {
			_ = closer.Close()
		}
	}
	d := &DB{closeFS: closeFS, dir: dir, opts: opts, baseFS: fs}
	if err := d.open(false); err != nil {
		closeFS()
		return nil, err
	}
	return d, nil
}

func (d *DB) open(readOnly bool) error {
	l := d.opts.Logger
	if l == nil {
		l = slog.Default()
	}
	l = l.With("component", d.opts.Component, "dir", d.dir)
	g := &guard{}
	// A failed MANIFEST write on one of Pebble's goroutines leaves this
	// instance's view of its files unreliable: fence it at once (its
	// background work can then neither write nor delete a file) and mark
	// it failed, so that its owner's next write reopens the directory. An
	// instance given up before needs nothing more. One still opening
	// cannot be given up (pebble.Open would wait for its flush for
	// ever): its Fatalf ends the process, as Pebble intends; Reopen does
	// not open a directory for writing on a nearly full disk, which is
	// what makes that rare.
	var installed atomic.Bool
	givenUp := func(msg string) bool {
		switch {
		case g.fenced.Load():
			return true
		case !installed.Load():
			return false
		}
		g.fence()
		d.mu.Lock()
		if d.g == g && d.failed == nil {
			d.failed = fmt.Errorf("pebble: %s", msg)
		}
		d.mu.Unlock()
		return true
	}
	db, err := pebble.Open(d.dir, &pebble.Options{
		FS:                 guardFS{FS: d.baseFS, g: g},
		CacheSize:          d.opts.CacheSize,
		MemTableSize:       d.opts.MemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             logger{l: l, givenUp: givenUp, background: &backgroundErrors{}},
		ReadOnly:           readOnly,
	})
	if err != nil {
		g.fence()
		return err
	}
	d.mu.Lock()
	d.DB, d.g, d.failed, d.wedged, d.gone = db, g, nil, false, false
	if readOnly {
		d.failed = ErrFailed // writes reopen read-write first
	}
	d.mu.Unlock()
	installed.Store(true)
	return nil
}

// Failed returns the error that made this instance unusable for writes
// (a failed commit, or any write-path error its files saw, such as
// ENOSPC while flushing a memtable), or nil.
func (d *DB) Failed() error {
	d.mu.Lock()
	failed := d.failed
	d.mu.Unlock()
	if failed != nil {
		return failed
	}
	return d.g.Fault()
}

func (d *DB) fail(err error, wedged bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed == nil {
		d.failed = err
	}
	d.wedged = d.wedged || wedged
}

// Apply commits b like pebble.DB.Apply, returning Pebble's fatal commit
// errors and commit-pipeline panics as errors (the instance is then
// failed). The caller must not use the database concurrently with a
// failing Apply and Reopen (readers between them are fine).
func (d *DB) Apply(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	return d.apply(b, opts, d.DB.Apply)
}

// ApplyNoSyncWait commits b like Apply but returns once b is in the WAL's
// queue and the memtable, before the WAL is synced; opts must ask for a
// sync. Nothing b holds is durable until SyncWait(b) returned nil, which
// the caller must call (once) before closing b. Batches applied one after
// the other are synced in that order: a nil SyncWait of one means every
// batch applied before it is synced too. This lets a writer group-commit
// its next batches while an earlier sync is in flight.
func (d *DB) ApplyNoSyncWait(b *pebble.Batch, opts *pebble.WriteOptions) error {
	return d.apply(b, opts, d.DB.ApplyNoSyncWait)
}

// SyncWait waits for the sync of b, applied with ApplyNoSyncWait. A failed
// sync leaves the instance failed, as a failed Apply does (the owner
// reopens it before writing again).
func (d *DB) SyncWait(b *pebble.Batch) error {
	if err := b.SyncWait(); err != nil {
		if f := d.g.Fault(); f != nil {
			err = fmt.Errorf("pebble: sync failed: %w", f)
		}
		d.fail(err, false)
		return err
	}
	return nil
}

func (d *DB) apply(b *pebble.Batch, opts *pebble.WriteOptions, apply func(*pebble.Batch, *pebble.WriteOptions) error) (err error) {
	if f := d.Failed(); f != nil {
		return fmt.Errorf("%w: %w", ErrFailed, f)
	}
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch v := r.(type) {
		case fatalError:
			err = v
			if f := d.g.Fault(); f != nil {
				err = fmt.Errorf("pebble: commit failed: %w", f) // v repeats f's text
			}
			d.fail(err, false)
		case error:
			err = v
			d.fail(err, true)
		default:
			panic(r)
		}
	}()
	if err := apply(b, opts); err != nil {
		d.fail(err, false)
		return err
	}
	return nil
}

// Set writes one key like pebble.DB.Set, through Apply.
func (d *DB) Set(key, value []byte, opts *pebble.WriteOptions) error {
	b := d.DB.NewBatch()
	defer b.Close()
	if err := b.Set(key, value, nil); err != nil {
		return err
	}
	return d.Apply(b, opts)
}

// Reopen gives up the current instance and opens the directory again;
// nothing else may use the database meanwhile (readers included: their
// iterators would outlive the instance). When the directory cannot be
// opened for writing (the disk is still full), it is opened read-only, so
// that what is stored stays readable, the database stays failed and
// Reopen returns the error: call it again later.
func (d *DB) Reopen() error {
	d.mu.Lock()
	wedged := d.wedged
	if d.failed == nil {
		d.failed = ErrFailed
	}
	d.mu.Unlock()
	if !d.gone {
		if !wedged {
			func() {
				defer func() { _ = recover() }() // a failed WAL writer may complain on close
				_ = d.DB.Close()
			}()
		}
		d.g.fence()
		d.gone = true
	}
	var err error
	if u, uerr := d.baseFS.GetDiskUsage(d.dir); uerr == nil && u.AvailBytes < d.minFreeToOpen() {
		// Opening for writing replays the WAL into memtables and waits
		// for their flush, which on a full disk fails and is retried
		// without end; read what is stored meanwhile.
		err = fmt.Errorf("%w: %d KiB free, %d KiB needed to open the database for writing",
			syscall.ENOSPC, u.AvailBytes>>10, d.minFreeToOpen()>>10)
	} else {
		err = d.open(false)
	}
	if err != nil && d.open(true) == nil {
		d.mu.Lock()
		d.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		d.mu.Unlock()
	}
	return err
}

// minFreeToOpen is the free space Reopen needs to open the directory for
// writing: room for flushing a few memtables and for a new WAL.
func (d *DB) minFreeToOpen() uint64 {
	mem := d.opts.MemTableSize
	if mem == 0 {
		mem = 4 << 20
	}
	return max(16<<20, 4*mem)
}

// Close closes the database, then the file system wrapper Open made.
func (d *DB) Close() error {
	var err error
	d.mu.Lock()
	wedged := d.wedged
	d.mu.Unlock()
	switch {
	case d.gone:
	case wedged:
		d.g.fence()
	default:
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("pebbledb: close: %v", r)
				}
			}()
			err = d.DB.Close()
		}()
		d.g.fence()
	}
	d.gone = true
	d.closeFS()
	return err
}

// CheckFormat verifies the format marker stored at key, writing version
// there if the database has none (a new database, or one whose creation
// crashed before the marker was durable: nothing else can have been
// written). A marker of another version is an error wrapping corrupt,
// the caller's sentinel.
func (d *DB) CheckFormat(key []byte, version string, corrupt error) error {
	v, closer, err := d.Get(key)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := d.Set(key, []byte(version), pebble.Sync); err != nil {
			return fmt.Errorf("write format marker: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read format marker: %w", err)
	}
	defer closer.Close()
	if string(v) != version {
		return fmt.Errorf("%w: format %q, want %q", corrupt, v, version)
	}
	return nil
}
