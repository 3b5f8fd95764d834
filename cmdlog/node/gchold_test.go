package node

import (
	"reflect"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
)

// TestGCHold: a round that writes only GCs is held with its messages, and
// so is every round after it that writes nothing, until a round that
// writes something else or a tick's round carries all of them out
// together, operations and messages in their order; a round with nothing
// held that writes something else, or nothing, passes through.
func TestGCHold(t *testing.T) {
	gc := func(n uint64) seq.PersistOp {
		return seq.PersistOp{Kind: seq.PersistGC, GC: msg.GC{FromGP: n, ToGP: n}}
	}
	recs := seq.PersistOp{Kind: seq.PersistRecords, Records: []msg.Record{{ID: msg.RecordID{Client: 1, Seq: 1}}}}
	send := func(to msg.NodeID) msg.Envelope { return msg.Envelope{To: to, Msg: msg.Heartbeat{}} }
	ready := func(ops []seq.PersistOp, ms ...msg.Envelope) seq.Ready { return seq.Ready{Persist: ops, Messages: ms} }

	var h gcHold
	if out := h.round(ready(nil, send(1)), false); !reflect.DeepEqual(out, ready(nil, send(1))) {
		t.Fatalf("nothing held, no writes: got %+v, want it passed through", out)
	}
	if out := h.round(ready([]seq.PersistOp{recs}, send(2)), false); !reflect.DeepEqual(out, ready([]seq.PersistOp{recs}, send(2))) {
		t.Fatalf("nothing held, records: got %+v, want it passed through", out)
	}
	if out := h.round(ready([]seq.PersistOp{gc(1)}, send(3)), false); len(out.Persist)+len(out.Messages) != 0 {
		t.Fatalf("a GC-only round was carried out: %+v", out)
	}
	if out := h.round(ready(nil, send(4)), false); len(out.Persist)+len(out.Messages) != 0 {
		t.Fatalf("a round without writes overtook a held one: %+v", out)
	}
	if out := h.round(ready([]seq.PersistOp{gc(2)}), false); len(out.Persist)+len(out.Messages) != 0 {
		t.Fatalf("a second GC-only round was carried out: %+v", out)
	}
	want := ready([]seq.PersistOp{gc(1), gc(2), recs}, send(3), send(4), send(5))
	if out := h.round(ready([]seq.PersistOp{recs}, send(5)), false); !reflect.DeepEqual(out, want) {
		t.Fatalf("records after held GCs: got %+v, want %+v", out, want)
	}
	if out := h.round(ready(nil, send(6)), false); !reflect.DeepEqual(out, ready(nil, send(6))) {
		t.Fatalf("after the flush: got %+v, want it passed through", out)
	}
	h.round(ready([]seq.PersistOp{gc(3)}, send(7)), false)
	want = ready([]seq.PersistOp{gc(3)}, send(7), send(8))
	if out := h.round(ready(nil, send(8)), true); !reflect.DeepEqual(out, want) {
		t.Fatalf("a tick's round: got %+v, want %+v", out, want)
	}
	want = ready([]seq.PersistOp{gc(4)}, send(9))
	h.round(ready([]seq.PersistOp{gc(4)}, send(9)), false)
	if out := h.round(ready([]seq.PersistOp{}), true); !reflect.DeepEqual(out, want) {
		t.Fatalf("a tick's round without writes: got %+v, want %+v", out, want)
	}
}
