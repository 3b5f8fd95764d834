package wal

import (
	"log/slog"
	"syscall"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/internal/pebbledb/pebbletest"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func records(seqs ...uint64) seq.PersistOp {
	op := seq.PersistOp{Kind: seq.PersistRecords}
	for _, s := range seqs {
		op.Records = append(op.Records, msg.Record{ID: msg.RecordID{Client: 7, Seq: s}, Data: []byte("x")})
	}
	return op
}

// TestAppendOnFailingDisk: with ENOSPC or EIO on every write, Append
// returns an error (before the fix Pebble's fatal commit error exited the
// process); once the disk works again the retried Append succeeds without
// a reopen of the process, and Load returns every operation once, the
// ones stored before the fault intact.
func TestAppendOnFailingDisk(t *testing.T) {
	for _, fault := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fault.Error(), func(t *testing.T) {
			mem := vfs.NewMem()
			disk := pebbletest.FailingDisk(fault)
			w, err := Open("wal", Options{FS: errorfs.Wrap(mem, disk), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Append([]seq.PersistOp{records(1, 2)}); err != nil {
				t.Fatal(err)
			}
			disk.On()
			for range 3 {
				if err := w.Append([]seq.PersistOp{records(3)}); err == nil {
					t.Fatalf("append on a failing disk: %v, want an error", err)
				}
			}
			disk.Off()
			if err := w.Append([]seq.PersistOp{records(3)}); err != nil {
				t.Fatalf("append after the disk recovered: %v", err)
			}
			if err := w.Append([]seq.PersistOp{records(4)}); err != nil {
				t.Fatal(err)
			}
			check := func(w *Pebble) {
				ops, err := w.Load()
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for _, op := range ops {
					for _, r := range op.Records {
						got = append(got, r.ID.Seq)
					}
				}
				if len(got) != 4 || got[0] != 1 || got[1] != 2 || got[2] != 3 || got[3] != 4 {
					t.Fatalf("WAL holds %v, want [1 2 3 4]", got)
				}
			}
			check(w)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, err = Open("wal", Options{FS: mem, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			check(w)
			w.Close()
		})
	}
}
