package dedup_test

import (
	"math"
	"testing"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// TestWorstCaseFitsTheViewRecord: the most a view record can carry under
// the admission and window rules (2 x DefaultMaxClients clients, each
// with the largest ids and DefaultWindow-2 ids above its mark) fits Fit,
// decodes over the mesh, and stays under the coordinator's limit (issue
// 16, finding 6: about 65k marks made the view record undecodable, 75k
// exceeded NATS's 1 MiB payload). EncodedSize is the coordinator's size.
func TestWorstCaseFitsTheViewRecord(t *testing.T) {
	tb := dedup.NewTable()
	const clients = 2 * dedup.DefaultMaxClients
	for c := uint64(0); c < clients; c++ {
		client := math.MaxUint64 - c
		base := uint64(math.MaxUint64 - 1000)
		tb.Raise(client, base, math.MaxUint64-1)             // mark base-1, the largest lease
		for k := uint64(1); k < dedup.DefaultWindow-1; k++ { // base itself missing
			id := msg.RecordID{Client: client, Seq: base + k}
			if !tb.InWindow(id, dedup.DefaultWindow) {
				t.Fatalf("id %v refused by the window", id)
			}
			tb.AddIn(id, math.MaxUint64-1)
		}
		if id := (msg.RecordID{Client: client, Seq: base + dedup.DefaultWindow - 1}); tb.InWindow(id, dedup.DefaultWindow) {
			t.Fatalf("id %v admitted %d above the mark", id, dedup.DefaultWindow)
		}
	}
	marks := tb.Live(math.MaxUint64-1, dedup.DefaultLeaseViews)
	if len(marks) != clients {
		t.Fatalf("%d live marks, want %d", len(marks), clients)
	}
	if err := dedup.Fit(marks); err != nil {
		t.Fatal(err)
	}
	v := msg.ViewRecord{Number: math.MaxUint64 - 1, Members: []msg.NodeID{1, 2, 3}, Leader: 1, StartGP: 1 << 40, Dedup: marks}
	enc := coord.EncodeViewRecord(v)
	if err := coord.CheckViewRecord(v); err != nil || len(enc) > coord.MaxRecordBytes {
		t.Fatalf("view record of %d bytes: %v", len(enc), err)
	}
	size := 0
	for _, m := range marks {
		size += dedup.EncodedSize(m)
		if n := dedup.EncodedSize(m); n > dedup.MaxMarkBytes(dedup.DefaultWindow) {
			t.Fatalf("a mark of %d bytes, over MaxMarkBytes %d", n, dedup.MaxMarkBytes(dedup.DefaultWindow))
		}
	}
	if size > dedup.MaxExportBytes || size > len(enc) {
		t.Fatalf("marks take %d bytes (record %d), over %d", size, len(enc), dedup.MaxExportBytes)
	}
	t.Logf("worst case: %d marks, %d bytes in the coordinator's encoding", len(marks), len(enc))
	got, err := codec.Decode(codec.Encode(nil, msg.StartView{View: v}))
	if err != nil {
		t.Fatalf("StartView with the marks: %v", err)
	}
	if n := len(got.(msg.StartView).View.Dedup); n != len(marks) {
		t.Fatalf("decoded %d marks, want %d", n, len(marks))
	}
	// Twice the marks do not fit.
	if err := dedup.Fit(append(marks, marks...)); err == nil {
		t.Fatalf("Fit accepted %d marks", 2*len(marks))
	}
}

// TestLeaseExpiry: a mark is exported while View + L is above the next
// view, and only then; FromMarks keeps the lease.
func TestLeaseExpiry(t *testing.T) {
	tb := dedup.NewTable()
	tb.AddIn(msg.RecordID{Client: 1, Seq: 1}, 5)
	tb.AddIn(msg.RecordID{Client: 2, Seq: 1}, 9)
	tb.AddIn(msg.RecordID{Client: 1, Seq: 2}, 3) // an older view does not shorten the lease
	for _, c := range []struct {
		next uint64
		want []uint64
	}{{6, []uint64{1, 2}}, {12, []uint64{1, 2}}, {13, []uint64{2}}, {16, []uint64{2}}, {17, nil}} {
		got := tb.Live(c.next, 8)
		if len(got) != len(c.want) {
			t.Fatalf("Live(%d) = %+v, want clients %v", c.next, got, c.want)
		}
		for i := range got {
			if got[i].Client != c.want[i] {
				t.Fatalf("Live(%d) = %+v, want clients %v", c.next, got, c.want)
			}
		}
	}
	next := dedup.FromMarks(tb.Live(12, 8))
	if m := next.Live(12, 8); len(m) != 2 || m[0].View != 5 || m[0].Mark != 2 || m[1].View != 9 {
		t.Fatalf("after FromMarks: %+v", m)
	}
}

// TestRaiseClosesGaps: a floor moves the mark over the gaps below it,
// keeps the ids above it, absorbs the run it meets, and never lowers the
// mark.
func TestRaiseClosesGaps(t *testing.T) {
	tb := dedup.NewTable()
	for _, s := range []uint64{1, 2, 4, 6, 7, 9} {
		tb.AddIn(msg.RecordID{Client: 1, Seq: s}, 1)
	}
	if id := (msg.RecordID{Client: 1, Seq: 2 + 4}); !tb.Has(id) || tb.InWindow(msg.RecordID{Client: 1, Seq: 7 + 1}, 4) {
		t.Fatalf("before the floor: mark 2, window 4 must refuse id 8")
	}
	if !tb.Raise(1, 6, 2) { // ids 3 and 5 abandoned
		t.Fatal("Raise(6) did not move the mark")
	}
	m := tb.Marks()[0]
	if m.Mark != 7 || len(m.Above) != 1 || m.Above[0] != 9 || m.View != 2 {
		t.Fatalf("after Raise(6): %+v, want mark 7 (6, 7 absorbed), above [9], view 2", m)
	}
	if tb.Raise(1, 3, 4) || tb.Marks()[0].Mark != 7 || tb.Marks()[0].View != 2 {
		t.Fatalf("a lower floor moved the mark, or renewed the lease: %+v", tb.Marks()[0])
	}
	if tb.Raise(5, 1, 4) || tb.Known(5) {
		t.Fatal("a floor that moves nothing created an entry")
	}
	if !tb.Has(msg.RecordID{Client: 1, Seq: 3}) || tb.AddIn(msg.RecordID{Client: 1, Seq: 5}, 4) || tb.AddIn(msg.RecordID{Client: 1, Seq: 9}, 4) || tb.Marks()[0].View != 2 {
		t.Fatal("an abandoned id below the floor is not answered as recorded, or a resend renewed the lease")
	}
	// A floor for a client without an entry creates it.
	if !tb.Raise(9, 100, 3) || !tb.Known(9) || !tb.InWindow(msg.RecordID{Client: 9, Seq: 100}, 2) {
		t.Fatal("Raise for a new client")
	}
}
