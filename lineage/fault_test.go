package lineage

import (
	"bytes"
	"context"
	"log/slog"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/anoptic/broadside/internal/pebbledb/pebbletest"
)

// TestPutRangeOnFailingDisk: a lineage write on a disk failing with
// ENOSPC or EIO returns an error (before the fix Pebble's fatal commit
// error exited the process), earlier ranges stay intact, and once the disk
// works again writes succeed in the same process.
func TestPutRangeOnFailingDisk(t *testing.T) {
	ctx := context.Background()
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			disk := pebbletest.FailingDisk(fault)
			s, err := OpenPebble("lineage", PebbleOptions{FS: errorfs.Wrap(vfs.NewMem(), disk), Logger: slog.New(slog.DiscardHandler), Sync: true})
			if err != nil {
				t.Fatal(err)
			}
			data := func(first uint64) []byte { return bytes.Repeat([]byte{byte(first)}, 100) }
			put := func(first uint64) error {
				return s.PutRange(ctx, RangeInfo{Shard: 2, FirstTick: first, LastTick: first + 9, Bytes: 100}, data(first))
			}
			if err := put(1); err != nil {
				t.Fatal(err)
			}
			disk.On()
			if err := put(11); err == nil {
				t.Fatal("put on a failing disk succeeded")
			}
			if err := s.PutMeta(ctx, "m", []byte("v")); err == nil {
				t.Fatal("put meta on a failing disk succeeded")
			}
			disk.Off()
			if err := put(11); err != nil {
				t.Fatalf("put after the disk recovered: %v", err)
			}
			for _, first := range []uint64{1, 11} {
				b, err := s.GetRange(ctx, 2, first)
				if err != nil || !bytes.Equal(b, data(first)) {
					t.Fatalf("range %d: %v", first, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
