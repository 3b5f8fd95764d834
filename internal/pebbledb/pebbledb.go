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
type DB struct {
	*pebble.DB
	closeFS func()
}

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
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                 fs,
		CacheSize:          opts.CacheSize,
		MemTableSize:       opts.MemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             Logger(logger),
	})
	if err != nil {
		closeFS()
		return nil, err
	}
	return &DB{DB: db, closeFS: closeFS}, nil
}

// Close closes the database, then the file system wrapper Open made.
func (d *DB) Close() error {
	err := d.DB.Close()
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
