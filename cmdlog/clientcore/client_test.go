package clientcore

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
)

var testMembers = []msg.NodeID{1, 2, 3}

// newTestClient returns a client that has learned an active view of
// testMembers.
func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.ID, cfg.ClientID = 100, 7
	cfg.Layout = msg.Layout{Shards: []msg.NodeID{10, 11}, StripeUnit: 4}
	c := New(cfg)
	c.Ready() // asks the coordinator
	c.Step(msg.Envelope{From: msg.Coordinator, To: 100, Msg: msg.CoordResp{ReqID: c.coordReq, OK: true, Rev: 1,
		View: msg.ViewRecord{Number: 1, Members: testMembers, Leader: 1}}})
	return c
}

// appendMessages returns the records per replica of rd's Append messages.
func appendMessages(rd Ready) map[msg.NodeID][][]msg.RecordID {
	out := map[msg.NodeID][][]msg.RecordID{}
	for _, env := range rd.Messages {
		if a, ok := env.Msg.(msg.Append); ok {
			var ids []msg.RecordID
			for _, r := range a.Records {
				ids = append(ids, r.ID)
			}
			out[env.To] = append(out[env.To], ids)
		}
	}
	return out
}

func ackAll(c *Client, ids ...msg.RecordID) {
	for _, m := range testMembers {
		c.Step(msg.Envelope{From: m, To: 100, Msg: msg.AppendAck{View: 1, IDs: ids}})
	}
}

// TestInflightCapBatches checks that appends made while MaxInflightBatches
// rounds are unacknowledged wait, then leave together in one message per
// replica, and that completions come in request order.
func TestInflightCapBatches(t *testing.T) {
	c := newTestClient(t, Config{MaxInflightBatches: 2})
	a := c.Append([]byte("a"))
	if got := appendMessages(c.Ready()); len(got) != 3 || len(got[1]) != 1 || len(got[1][0]) != 1 {
		t.Fatalf("first round: %v", got)
	}
	b := c.Append([]byte("b"))
	if got := appendMessages(c.Ready()); len(got) != 3 {
		t.Fatalf("second round: %v", got)
	}
	var queued []msg.RecordID
	for range 3 {
		queued = append(queued, c.Append([]byte("q")))
	}
	if got := appendMessages(c.Ready()); len(got) != 0 {
		t.Fatalf("sent %v with 2 rounds in flight (cap 2)", got)
	}
	if c.Pending() != 5 {
		t.Fatalf("Pending = %d, want 5", c.Pending())
	}
	// b's round completes first (acks in reverse order within a message).
	ackAll(c, b)
	rd := c.Ready()
	if len(rd.Completions) != 1 || rd.Completions[0].ID != b {
		t.Fatalf("completions %+v, want b", rd.Completions)
	}
	got := appendMessages(rd)
	if len(got) != 3 {
		t.Fatalf("after a round completed: %v", got)
	}
	for _, m := range testMembers {
		if len(got[m]) != 1 || len(got[m][0]) != 3 || got[m][0][0] != queued[0] || got[m][0][2] != queued[2] {
			t.Fatalf("replica %d got %v, want one message with %v", m, got[m], queued)
		}
	}
	ackAll(c, queued[2], a, queued[0], queued[1])
	rd = c.Ready()
	want := []msg.RecordID{a, queued[0], queued[1], queued[2]}
	if len(rd.Completions) != len(want) {
		t.Fatalf("completions %+v, want %v", rd.Completions, want)
	}
	for i, cp := range rd.Completions {
		if cp.Kind != CompleteAppend || cp.ID != want[i] {
			t.Fatalf("completion %d = %+v, want %v (request order)", i, cp, want[i])
		}
	}
	if c.Pending() != 0 || len(c.rounds) != 0 {
		t.Fatalf("Pending = %d, rounds %v after all acked", c.Pending(), c.rounds)
	}
}

// TestViewChangeResendsAll checks that a new view resends every incomplete
// append (whatever the cap) and none that completed.
func TestViewChangeResendsAll(t *testing.T) {
	c := newTestClient(t, Config{MaxInflightBatches: 1})
	a := c.Append([]byte("a"))
	c.Ready()
	b := c.Append([]byte("b"))
	c.Ready() // capped: b waits
	ackAll(c, a)
	c.Ready() // a completes, b leaves
	d := c.Append([]byte("d"))
	c.Ready() // capped: d waits
	c.wantView = true
	c.Ready()
	c.Step(msg.Envelope{From: msg.Coordinator, To: 100, Msg: msg.CoordResp{ReqID: c.coordReq, OK: true, Rev: 2,
		View: msg.ViewRecord{Number: 2, Members: testMembers, Leader: 2}}})
	got := appendMessages(c.Ready())
	for _, m := range testMembers {
		if len(got[m]) != 1 || len(got[m][0]) != 2 || got[m][0][0] != b || got[m][0][1] != d {
			t.Fatalf("replica %d got %v in the new view, want [%v %v]", m, got[m], b, d)
		}
	}
}

// TestForeignIDsIndexed: appends with foreign ids (a game server's
// players' commands) are acknowledged through the id index: an id
// appended again while pending is sent once and completes once, acks
// complete exactly the appends they name, in request order.
func TestForeignIDsIndexed(t *testing.T) {
	c := newTestClient(t, Config{})
	var ids []msg.RecordID
	for i := range 100 {
		ids = append(ids, c.AppendWithID(msg.RecordID{Client: 1<<63 | uint64(i%10), Seq: uint64(i/10 + 1)}, []byte{byte(i)}))
	}
	c.AppendWithID(ids[5], []byte{5}) // a resend while pending
	sent := 0
	for _, batches := range appendMessages(c.Ready()) {
		for _, b := range batches {
			sent += len(b)
		}
	}
	if sent != 3*100 {
		t.Fatalf("%d records sent to 3 replicas, want 300 (the resent id once)", sent)
	}
	ackAll(c, ids[90], ids[5], ids[7])
	var got []msg.RecordID
	for _, cp := range c.Ready().Completions {
		if cp.Kind == CompleteAppend {
			got = append(got, cp.ID)
		}
	}
	if len(got) != 3 || got[0] != ids[5] || got[1] != ids[7] || got[2] != ids[90] {
		t.Fatalf("completions %v, want %v %v %v in request order", got, ids[5], ids[7], ids[90])
	}
	if p := c.Pending(); p != 97 {
		t.Fatalf("%d pending, want 97", p)
	}
}

// newView makes the client learn view n of testMembers.
func newView(c *Client, n, rev uint64) {
	c.Ready()
	c.wantView = true
	c.requestView()
	c.Step(msg.Envelope{From: msg.Coordinator, To: 100, Msg: msg.CoordResp{ReqID: c.coordReq, OK: true, Rev: rev,
		View: msg.ViewRecord{Number: n, Members: testMembers, Leader: 1}}})
}

// TestLeaseRunsOut: an append pending while LeaseViews views pass
// completes with its outcome unknown and is never sent again; the floor
// the client's later Appends carry passes it, and the appends completed
// before it.
func TestLeaseRunsOut(t *testing.T) {
	c := newTestClient(t, Config{LeaseViews: 3})
	a := c.Append([]byte("a")) // seq 1, first sent in view 1
	b := c.Append([]byte("b")) // seq 2
	c.Ready()
	ackAll(c, b)
	if rd := c.Ready(); len(rd.Completions) != 1 || rd.Completions[0].ID != b || rd.Completions[0].Unknown {
		t.Fatalf("completions %+v, want b stored", rd.Completions)
	}
	newView(c, 3, 2) // 3 - 1 < 3: still sent
	if got := appendMessages(c.Ready()); len(got[1]) != 1 || got[1][0][0] != a {
		t.Fatalf("view 3: sent %v, want a resent", got)
	}
	newView(c, 4, 3) // 4 - 1 >= 3: lease ran out
	rd := c.Ready()
	if len(rd.Completions) != 1 || rd.Completions[0].ID != a || !rd.Completions[0].Unknown {
		t.Fatalf("view 4: completions %+v, want a unknown", rd.Completions)
	}
	if got := appendMessages(rd); len(got) != 0 || c.Pending() != 0 || c.Unknown() != 1 {
		t.Fatalf("view 4: sent %v (pending %d), want nothing", got, c.Pending())
	}
	d := c.Append([]byte("d")) // seq 3: the floor is 3 (1 abandoned, 2 stored)
	for _, env := range c.Ready().Messages {
		if m, ok := env.Msg.(msg.Append); ok {
			if len(m.Floors) != 1 || m.Floors[0] != (msg.RecordID{Client: 7, Seq: d.Seq}) {
				t.Fatalf("Append %+v, want floor 7/%d", m, d.Seq)
			}
		}
	}
}

// TestProducerFloor: AppendWithFloor's floor travels with the record's
// client, never above the record itself; an own id appended by the
// caller switches the client's own floor off.
func TestProducerFloor(t *testing.T) {
	c := newTestClient(t, Config{})
	c.AppendWithFloor(msg.RecordID{Client: 9, Seq: 5}, 4, []byte("x"))
	c.AppendWithFloor(msg.RecordID{Client: 9, Seq: 6}, 9, []byte("y")) // capped at 6
	c.AppendWithFloor(msg.RecordID{Client: 8, Seq: 1}, 0, []byte("z"))
	for _, env := range c.Ready().Messages {
		if m, ok := env.Msg.(msg.Append); ok {
			if len(m.Floors) != 1 || m.Floors[0] != (msg.RecordID{Client: 9, Seq: 6}) {
				t.Fatalf("floors %v, want [9/6]", m.Floors)
			}
		}
	}
	c.Append([]byte("own"))
	c.AppendWithID(msg.RecordID{Client: 7, Seq: 40}, []byte("mine too"))
	c.Append([]byte("own"))
	for _, env := range c.Ready().Messages {
		if m, ok := env.Msg.(msg.Append); ok {
			for _, f := range m.Floors {
				if f.Client == 7 {
					t.Fatalf("floor %v declared for a client whose ids the caller also chooses", f)
				}
			}
		}
	}
}

// TestFloorsManyClients: one floor per client however many clients share
// a message (the map path), the highest declared.
func TestFloorsManyClients(t *testing.T) {
	c := newTestClient(t, Config{})
	for client := uint64(1); client <= 40; client++ {
		c.AppendWithFloor(msg.RecordID{Client: 1000 + client, Seq: 10}, 5, []byte("a"))
		c.AppendWithFloor(msg.RecordID{Client: 1000 + client, Seq: 11}, 9, []byte("b"))
	}
	for _, env := range c.Ready().Messages {
		m, ok := env.Msg.(msg.Append)
		if !ok {
			continue
		}
		if len(m.Floors) != 40 {
			t.Fatalf("%d floors, want 40", len(m.Floors))
		}
		for i, f := range m.Floors {
			if f != (msg.RecordID{Client: 1001 + uint64(i), Seq: 9}) {
				t.Fatalf("floor %d = %v, want %d/9", i, f, 1001+i)
			}
		}
	}
}

// TestReuseReady checks that after ReuseReady the next Ready collects its
// messages and completions in the previous round's arrays, cleared, with
// the right contents.
func TestReuseReady(t *testing.T) {
	c := newTestClient(t, Config{})
	c.Ready()
	id1 := c.Append([]byte("a"))
	rd1 := c.Ready()
	if got := appendMessages(rd1); len(got) != len(testMembers) || len(got[1]) != 1 || got[1][0][0] != id1 {
		t.Fatalf("first round: %v", got)
	}
	firstMsg := &rd1.Messages[0]
	c.ReuseReady(rd1)
	if rd1.Messages[0].Msg != nil {
		t.Fatalf("the reused round's messages were not cleared")
	}
	ackAll(c, id1)
	id2 := c.Append([]byte("b"))
	rd2 := c.Ready()
	if len(rd2.Completions) != 1 || rd2.Completions[0].ID != id1 {
		t.Fatalf("second round's completions: %+v, want %v's", rd2.Completions, id1)
	}
	if got := appendMessages(rd2); len(got) != len(testMembers) || got[2][0][0] != id2 {
		t.Fatalf("second round: %v", got)
	}
	if &rd2.Messages[0] != firstMsg {
		t.Fatalf("the second round did not reuse the first round's message array")
	}
	firstCompletion := &rd2.Completions[0]
	c.ReuseReady(rd2)
	if rd2.Completions[0].ID != (msg.RecordID{}) {
		t.Fatalf("the reused round's completions were not cleared")
	}
	ackAll(c, id2)
	rd3 := c.Ready()
	if len(rd3.Completions) != 1 || rd3.Completions[0].ID != id2 || &rd3.Completions[0] != firstCompletion {
		t.Fatalf("third round's completions: %+v (reused: %v)", rd3.Completions, len(rd3.Completions) > 0 && &rd3.Completions[0] == firstCompletion)
	}
}
