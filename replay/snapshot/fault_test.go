package snapshot

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

// TestPutOnFailingDisk: a snapshot Put on a disk failing with ENOSPC or
// EIO returns an error (before the fix Pebble's fatal commit error exited
// the process), earlier snapshots stay readable and intact, and once the
// disk works again Put succeeds in the same process.
func TestPutOnFailingDisk(t *testing.T) {
	ctx := context.Background()
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			disk := pebbletest.FailingDisk(fault)
			s, err := OpenPebble("snap", PebbleOptions{FS: errorfs.Wrap(vfs.NewMem(), disk), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			blob := func(tick uint64) []byte { return bytes.Repeat([]byte{byte(tick)}, 1000) }
			put := func(tick uint64) error {
				return s.Put(ctx, Meta{Shard: 1, Tick: tick, Pos: tick, Epoch: 1, Full: true, Base: tick, ChainLen: 1}, blob(tick))
			}
			if err := put(10); err != nil {
				t.Fatal(err)
			}
			disk.On()
			if err := put(20); err == nil {
				t.Fatal("put on a failing disk succeeded")
			}
			if err := put(30); err == nil {
				t.Fatal("second put on a failing disk succeeded")
			}
			if b, err := s.Get(ctx, 1, 10); err != nil || !bytes.Equal(b, blob(10)) {
				t.Fatalf("earlier snapshot during the fault: %v", err)
			}
			disk.Off()
			if err := put(40); err != nil {
				t.Fatalf("put after the disk recovered: %v", err)
			}
			ms, err := s.List(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			var ticks []uint64
			for _, m := range ms {
				ticks = append(ticks, m.Tick)
			}
			if len(ticks) != 2 || ticks[0] != 10 || ticks[1] != 40 {
				t.Fatalf("snapshots listed: %v, want [10 40]", ticks)
			}
			for _, tick := range []uint64{10, 40} {
				if b, err := s.Get(ctx, 1, tick); err != nil || !bytes.Equal(b, blob(tick)) {
					t.Fatalf("snapshot %d: %v", tick, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
