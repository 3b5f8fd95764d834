package shardstore

import (
	"log/slog"
	"syscall"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/internal/pebbledb/pebbletest"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func puts(from, to uint64) shard.Writes {
	var w shard.Writes
	for p := from; p <= to; p++ {
		w.Puts = append(w.Puts, msg.Entry{Pos: p, Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: p}, Data: []byte{byte(p)}}})
	}
	return w
}

// TestApplyOnFailingDisk: with ENOSPC or EIO, Apply, ApplyAll and
// ApplyLazy return errors (before the fix Pebble's fatal commit error
// exited the process); once the disk works again the same writes succeed
// in the same process, and every entry stored before is intact.
func TestApplyOnFailingDisk(t *testing.T) {
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			mem := vfs.NewMem()
			disk := pebbletest.FailingDisk(fault)
			p, err := Open("shard", Options{FS: errorfs.Wrap(mem, disk), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Apply(puts(1, 10)); err != nil {
				t.Fatal(err)
			}
			disk.On()
			if err := p.Apply(puts(11, 20)); err == nil {
				t.Fatal("apply on a failing disk succeeded")
			}
			if err := p.ApplyAll([]shard.Writes{puts(11, 15), puts(16, 20)}); err == nil {
				t.Fatal("apply-all on a failing disk succeeded")
			}
			meta := shard.Meta{Epoch: 1, StableGP: 10}
			if err := p.ApplyLazy([]shard.Writes{{Meta: &meta, Lazy: true}}); err == nil {
				t.Fatal("lazy apply on a failing disk succeeded")
			}
			disk.Off()
			if err := p.ApplyAll([]shard.Writes{puts(11, 15), puts(16, 20)}); err != nil {
				t.Fatalf("apply after the disk recovered: %v", err)
			}
			for pos := uint64(1); pos <= 20; pos++ {
				e, ok, err := p.Get(pos)
				if err != nil || !ok || e.Record.ID.Seq != pos || e.Record.Data[0] != byte(pos) {
					t.Fatalf("position %d: %+v %v %v", pos, e, ok, err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
