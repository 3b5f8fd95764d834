package dedup_test

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// TestBoundedFitsTheViewRecord: with 100,000 clients (issue 16, finding
// 6: about 65k made the view record undecodable, 75k exceeded NATS's
// 1 MiB payload), the exported marks keep the most recent clients, the
// record decodes over the mesh and stays under the coordinator's limit.
func TestBoundedFitsTheViewRecord(t *testing.T) {
	tb := dedup.NewTable()
	const clients = 100_000
	for c := uint64(1); c <= clients; c++ {
		tb.Add(msg.RecordID{Client: c, Seq: 1})
		tb.Add(msg.RecordID{Client: c, Seq: 3}) // one id above the mark
	}
	// Client 7, old, appends again: it is among the most recent.
	tb.Add(msg.RecordID{Client: 7, Seq: 2})
	marks := tb.Bounded(dedup.MaxExportClients, dedup.MaxExportBytes)
	if len(marks) == 0 || len(marks) > dedup.MaxExportClients {
		t.Fatalf("%d marks exported, want 1..%d", len(marks), dedup.MaxExportClients)
	}
	if last := marks[len(marks)-1]; last.Client != 7 || last.Mark != 3 {
		t.Fatalf("newest mark %+v, want client 7 at mark 3", last)
	}
	if marks[len(marks)-2].Client != clients {
		t.Fatalf("second newest %d, want %d", marks[len(marks)-2].Client, clients)
	}
	for _, m := range marks {
		if m.Client != 7 && m.Client <= clients-uint64(len(marks)) {
			t.Fatalf("client %d exported, but it is older than the %d newest", m.Client, len(marks))
		}
	}
	v := msg.ViewRecord{Number: 9, Members: []msg.NodeID{1, 2, 3}, Leader: 1, StartGP: 1 << 40, Dedup: marks}
	if n := len(coord.EncodeViewRecord(v)); n > coord.MaxRecordBytes {
		t.Fatalf("view record encodes to %d bytes, over %d", n, coord.MaxRecordBytes)
	}
	got, err := codec.Decode(codec.Encode(nil, msg.StartView{View: v}))
	if err != nil {
		t.Fatalf("StartView with the exported marks: %v", err)
	}
	if n := len(got.(msg.StartView).View.Dedup); n != len(marks) {
		t.Fatalf("decoded %d marks, want %d", n, len(marks))
	}
	// The order carries recency into the next view's table.
	next := dedup.FromMarks(marks)
	if again := next.Bounded(2, dedup.MaxExportBytes); again[1].Client != 7 || again[0].Client != clients {
		t.Fatalf("after FromMarks the newest are %+v, want clients %d, 7", again, uint64(clients))
	}
	// Every exported client's ids are still recognised.
	for _, m := range marks {
		if !next.Has(msg.RecordID{Client: m.Client, Seq: 1}) {
			t.Fatalf("client %d: id 1 forgotten", m.Client)
		}
	}
}

// TestBoundedHugeWindow: a client whose ids above its mark alone exceed
// the budget keeps its mark and the lowest ids that fit.
func TestBoundedHugeWindow(t *testing.T) {
	tb := dedup.NewTable()
	for s := uint64(2); s < 2*100_000; s += 2 {
		tb.Add(msg.RecordID{Client: 1, Seq: s})
	}
	marks := tb.Bounded(dedup.MaxExportClients, 64<<10)
	if len(marks) != 1 || dedup.MarkSize(marks[0]) > 64<<10 || len(marks[0].Above) == 0 || marks[0].Above[0] != 2 {
		t.Fatalf("got %d marks (size %d), want client 1 with its lowest ids within 64 KiB", len(marks), dedup.MarkSize(marks[0]))
	}
}
