package seq_test

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
)

// TestReuseReady checks that after ReuseReady the next Ready collects its
// messages in the previous round's (cleared) array, and that messages
// stepped before ReuseReady are never lost to it.
func TestReuseReady(t *testing.T) {
	r := seq.New(seq.Config{ID: 1, Replicas: []msg.NodeID{1, 2, 3},
		Layout: msg.Layout{Shards: []msg.NodeID{101}, StripeUnit: 4}}, 0)
	appendFrom := func(client msg.NodeID, seq uint64) {
		r.Step(msg.Envelope{From: client, To: 1, Msg: msg.Append{View: 1,
			Records: []msg.Record{{ID: msg.RecordID{Client: uint64(client), Seq: seq}, Data: []byte("x")}}}})
	}
	rejectedTo := func(rd seq.Ready) []msg.NodeID {
		var to []msg.NodeID
		for _, e := range rd.Messages {
			if _, ok := e.Msg.(msg.AppendReject); !ok {
				t.Fatalf("unexpected message %T", e.Msg)
			}
			to = append(to, e.To)
		}
		return to
	}
	// A replica without a view refuses every Append: one message each.
	appendFrom(1000, 1)
	rd1 := r.Ready()
	if got := rejectedTo(rd1); len(got) != 1 || got[0] != 1000 {
		t.Fatalf("first round sent to %v, want [1000]", got)
	}
	first := &rd1.Messages[:1][0]
	r.ReuseReady(rd1)
	if rd1.Messages[0].Msg != nil {
		t.Fatalf("the reused round's messages were not cleared")
	}
	appendFrom(1001, 1)
	rd2 := r.Ready()
	if got := rejectedTo(rd2); len(got) != 1 || got[0] != 1001 {
		t.Fatalf("second round sent to %v, want [1001]", got)
	}
	if &rd2.Messages[0] != first {
		t.Fatalf("the second round did not reuse the first round's array")
	}
	// Stepped before the driver is done with rd2: ReuseReady must keep it.
	appendFrom(1002, 1)
	r.ReuseReady(rd2)
	if got := rejectedTo(r.Ready()); len(got) != 1 || got[0] != 1002 {
		t.Fatalf("a message stepped before ReuseReady: sent to %v, want [1002]", got)
	}
}
