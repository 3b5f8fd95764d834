package pebbledb

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/anoptic/broadside/internal/pebbledb/pebbletest"
)

// TestWriteFailureThenReopen: a synced write that fails with ENOSPC or EIO
// is an error (not an exit or a panic), the instance refuses further
// writes until reopened, and after the disk recovers a reopen keeps
// everything stored before and accepts new writes.
func TestWriteFailureThenReopen(t *testing.T) {
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			full := pebbletest.FailingDisk(fault)
			db := openWithKeys(t, full, 100)
			full.On()
			err := db.Set([]byte("lost"), []byte("v"), pebble.Sync)
			if err == nil || !errors.Is(err, fault) {
				t.Fatalf("write on a full disk: %v, want an error wrapping %v", err, fault)
			}
			if err := db.Set([]byte("lost2"), []byte("v"), pebble.NoSync); !errors.Is(err, ErrFailed) {
				t.Fatalf("second write: %v, want ErrFailed", err)
			}
			if err := db.Reopen(); err == nil {
				t.Fatalf("reopen on a full disk succeeded")
			}
			full.Off()
			if err := db.Reopen(); err != nil {
				t.Fatalf("reopen after space returned: %v", err)
			}
			writeCheckClose(t, db, 100)
		})
	}
}

// TestManifestWriteFailureInTheBackground: a flush whose MANIFEST write
// fails (a full disk met by Pebble's own goroutine, not by a commit) does
// not end the process: the instance is given up (failed, its files
// fenced), and a reopen after the disk recovers keeps everything synced
// before and accepts new writes. Without the Logger's givenUp the
// background Fatalf's panic kills the test binary.
func TestManifestWriteFailureInTheBackground(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.Contains(op.Path, "MANIFEST") &&
			op.Kind != errorfs.OpRemove && op.Kind != errorfs.OpFileClose && op.Kind != errorfs.OpLock {
			return syscall.ENOSPC
		}
		return nil
	})}
	db := openWithKeys(t, full, 100)
	full.On()
	if _, err := db.AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for db.Failed() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the flush's failed MANIFEST write did not fail the instance")
		}
		time.Sleep(time.Millisecond)
	}
	if err := db.Set([]byte("refused"), []byte("v"), pebble.Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("write to the given-up instance: %v, want ErrFailed", err)
	}
	if _, c, err := db.Get([]byte("k050")); err != nil {
		t.Fatalf("read from the given-up instance: %v", err)
	} else {
		c.Close()
	}
	full.Off()
	if err := db.Reopen(); err != nil {
		t.Fatalf("reopen after space returned: %v", err)
	}
	writeCheckClose(t, db, 100)
}

// openWithKeys opens a database on a memory disk that faults as inj
// says, and writes the keys k000 up to k(n-1), synced.
func openWithKeys(t *testing.T, inj errorfs.Injector, n int) *DB {
	t.Helper()
	db, err := Open("db", Options{FS: errorfs.Wrap(vfs.NewMem(), inj), Logger: slog.New(slog.DiscardHandler), Component: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "k%03d", i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// writeCheckClose checks a reopened database: a synced write succeeds,
// the keys k000 up to k(n-1) written before the fault are all there, and
// it closes cleanly.
func writeCheckClose(t *testing.T, db *DB, n int) {
	t.Helper()
	if err := db.Set([]byte("after"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, c, err := db.Get(fmt.Appendf(nil, "k%03d", i)); err != nil {
			t.Fatalf("k%03d after reopen: %v", i, err)
		} else {
			c.Close()
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReopenWaitsForFreeSpace: on a nearly full disk Reopen does not open
// the directory for writing (Pebble's open would retry a failing flush
// for ever); it opens it read-only, says why, and opens it for writing
// once space is back.
func TestReopenWaitsForFreeSpace(t *testing.T) {
	mem := vfs.NewMem()
	db, err := Open("db", Options{FS: mem, Logger: slog.New(slog.DiscardHandler), Component: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 64 << 10, TotalBytes: 48 << 20})
	err = db.Reopen()
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "64 KiB free") {
		t.Fatalf("reopen with 64 KiB free: %v, want ENOSPC naming the free space", err)
	}
	if _, c, err := db.Get([]byte("k")); err != nil {
		t.Fatalf("read while the disk is nearly full: %v", err)
	} else {
		c.Close()
	}
	if err := db.Set([]byte("k2"), []byte("v"), pebble.Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("write while the disk is nearly full: %v, want ErrFailed", err)
	}
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 40 << 20, TotalBytes: 48 << 20})
	if err := db.Reopen(); err != nil {
		t.Fatalf("reopen with 40 MiB free: %v", err)
	}
	if err := db.Set([]byte("k2"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
