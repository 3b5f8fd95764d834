package wal

import (
	"reflect"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func sampleOps() []seq.PersistOp {
	return []seq.PersistOp{
		{Kind: seq.PersistStartView, View: msg.ViewRecord{Number: 3, Members: []msg.NodeID{1, 2}, Leader: 2, StartGP: 9,
			Dedup: []msg.ClientMark{{Client: 7, Mark: 4, Above: []uint64{6}}}}},
		{Kind: seq.PersistRecords, Records: []msg.Record{{ID: msg.RecordID{Client: 7, Seq: 5}, Data: []byte("x")}}},
		{Kind: seq.PersistGC, GC: msg.GC{View: 3, FromGP: 10, ToGP: 10, IDs: []msg.RecordID{{Client: 7, Seq: 5}}}},
		{Kind: seq.PersistSeal},
		{Kind: seq.PersistFloor, Floor: []msg.RecordID{{Client: 7, Seq: 9}, {Client: 1 << 63, Seq: 2}}},
	}
}

func sampleCheckpoint() seq.PersistOp {
	return seq.PersistOp{Kind: seq.PersistCheckpoint, Checkpoint: &seq.Checkpoint{
		View:   msg.ViewRecord{Number: 3, Members: []msg.NodeID{1, 2}, Leader: 2, StartGP: 9, Dedup: []msg.ClientMark{{Client: 7, Mark: 4}}},
		Sealed: true, LastOrderedGP: 11, StableGP: 10,
		Dedup:     []msg.ClientMark{{Client: 7, Mark: 6, Above: []uint64{8}, View: 3}, {Client: 9, Mark: 1, View: 2}},
		Ordered:   []msg.Entry{{Pos: 11, Record: msg.Record{ID: msg.RecordID{Client: 7, Seq: 6}, Data: []byte("y")}}},
		Unordered: []msg.Record{{ID: msg.RecordID{Client: 7, Seq: 8}, Data: []byte("z")}},
	}}
}

// A checkpoint's batch deletes every operation before it; a reopened WAL
// loads the checkpoint and what followed, and keeps compacting.
func TestCheckpointCompacts(t *testing.T) {
	fs := vfs.NewMem()
	w, err := Open("wal", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ops, cp := sampleOps(), sampleCheckpoint()
	if err := w.Append(ops); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]seq.PersistOp{ops[1], cp, ops[2]}); err != nil {
		t.Fatal(err)
	}
	want := []seq.PersistOp{cp, ops[2]}
	if got, err := w.Load(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v (%v)\nwant %+v", got, err, want)
	}
	w.Close()
	if w, err = Open("wal", Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, err := w.Load(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: loaded %+v (%v)", got, err)
	}
	if err := w.Append([]seq.PersistOp{ops[3], cp}); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Load(); err != nil || !reflect.DeepEqual(got, []seq.PersistOp{cp}) {
		t.Fatalf("after a second checkpoint: loaded %+v (%v)", got, err)
	}
}

// Checkpoints larger than one codec message are chunked, and decode back.
func TestLargeCheckpointRoundTrip(t *testing.T) {
	cp := seq.Checkpoint{View: msg.ViewRecord{Number: 1, Members: []msg.NodeID{1}, Leader: 1}, LastOrderedGP: 30000, StableGP: 10000}
	for i := range 20000 {
		cp.Ordered = append(cp.Ordered, msg.Entry{Pos: 10001 + uint64(i), Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: uint64(i + 1)}, Data: make([]byte, 300)}})
		cp.Unordered = append(cp.Unordered, msg.Record{ID: msg.RecordID{Client: 2, Seq: uint64(i + 1)}, Data: make([]byte, 300)})
		cp.Dedup = append(cp.Dedup, msg.ClientMark{Client: uint64(i + 1), Mark: 5, Above: []uint64{7, 9}})
	}
	op := seq.PersistOp{Kind: seq.PersistCheckpoint, Checkpoint: &cp}
	got, err := DecodeOp(encodeOp(nil, op))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, op) {
		t.Fatalf("large checkpoint changed in a round trip")
	}
}

func TestAppendLoadReopen(t *testing.T) {
	fs := vfs.NewMem()
	w, err := Open("wal", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ops := sampleOps()
	if err := w.Append(ops[:2]); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ops[2:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = Open("wal", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got, err := w.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Fatalf("loaded %+v\nwant %+v", got, ops)
	}
	// Appends after a reopen continue the sequence.
	if err := w.Append(ops[:1]); err != nil {
		t.Fatal(err)
	}
	got, _ = w.Load()
	if len(got) != len(ops)+1 || !reflect.DeepEqual(got[len(ops)], ops[0]) {
		t.Fatalf("after reopen+append: %d ops", len(got))
	}
}

func TestDecodeOpRejectsCorruption(t *testing.T) {
	for _, op := range append(sampleOps(), sampleCheckpoint()) {
		b := encodeOp(nil, op)
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x40
			if _, err := DecodeOp(c); err == nil {
				t.Fatalf("flipping byte %d of %v went unnoticed", i, op.Kind)
			}
		}
		if _, err := DecodeOp(b[:len(b)-1]); err == nil && len(b) > 5 {
			t.Fatalf("truncated %v decoded", op.Kind)
		}
	}
}

func FuzzDecodeOp(f *testing.F) {
	for _, op := range append(sampleOps(), sampleCheckpoint()) {
		f.Add(encodeOp(nil, op))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := DecodeOp(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		if again := encodeOp(nil, op); string(again) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// TestStartWaitRewind: writes started one after the other and waited for
// in order load as if appended; after Rewind to a started write, writing
// it and the writes after it again with Append gives the same operations
// under the same keys (nothing twice).
func TestStartWaitRewind(t *testing.T) {
	fs := vfs.NewMem()
	w, err := Open("wal", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ops := sampleOps()
	var waits []func() error
	var rewinds []func()
	for i := range ops {
		wait, rewind, err := w.StartAppend(ops[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		waits, rewinds = append(waits, wait), append(rewinds, rewind)
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Fatalf("loaded %+v\nwant %+v", got, ops)
	}
	rewinds[1]()
	if err := w.Append(ops[1:]); err != nil {
		t.Fatal(err)
	}
	if got, _ = w.Load(); !reflect.DeepEqual(got, ops) {
		t.Fatalf("after the rewind and rewrite: %d ops, want %d", len(got), len(ops))
	}
}
