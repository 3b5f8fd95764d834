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
	if len(got) != 5 || !reflect.DeepEqual(got[4], ops[0]) {
		t.Fatalf("after reopen+append: %d ops", len(got))
	}
}

func TestDecodeOpRejectsCorruption(t *testing.T) {
	for _, op := range sampleOps() {
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
	for _, op := range sampleOps() {
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
