package pebbledb

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"

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
			mem := vfs.NewMem()
			full := pebbletest.FailingDisk(fault)
			db, err := Open("db", Options{FS: errorfs.Wrap(mem, full), Logger: slog.New(slog.DiscardHandler), Component: "test"})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if err := db.Set(fmt.Appendf(nil, "k%03d", i), []byte("v"), pebble.Sync); err != nil {
					t.Fatal(err)
				}
			}
			full.On()
			err = db.Set([]byte("lost"), []byte("v"), pebble.Sync)
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
			if err := db.Set([]byte("after"), []byte("v"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if _, c, err := db.Get(fmt.Appendf(nil, "k%03d", i)); err != nil {
					t.Fatalf("k%03d after reopen: %v", i, err)
				} else {
					c.Close()
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
