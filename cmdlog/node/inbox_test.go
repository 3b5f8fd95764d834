package node

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// TestInboxByteBudget (issue 16, finding 7): the inbox refuses messages
// beyond its byte budget however few they are, and takes them again once
// the node has taken the queued ones.
func TestInboxByteBudget(t *testing.T) {
	in := newInbox(1024, 1<<20)
	big := msg.Envelope{From: 7, Msg: msg.Append{Records: []msg.Record{{Data: make([]byte, 300<<10)}}}}
	for i := range 3 {
		if !in.Deliver(big) {
			t.Fatalf("message %d of 300 KiB refused under a 1 MiB budget", i)
		}
	}
	if in.Deliver(big) {
		t.Fatal("a fourth message of 300 KiB accepted under a 1 MiB budget")
	}
	if in.Dropped() != 1 || in.Bytes() > 1<<20 {
		t.Fatalf("dropped %d, %d bytes queued", in.Dropped(), in.Bytes())
	}
	// Small messages still fit beside them.
	if !in.Deliver(msg.Envelope{From: 7, Msg: msg.Heartbeat{View: 1}}) {
		t.Fatal("a heartbeat refused")
	}
	env := <-in.C()
	in.Took(env)
	if !in.Deliver(big) {
		t.Fatal("refused after the node took a message")
	}
	for len(in.C()) > 0 {
		in.Took(<-in.C())
	}
	if in.Bytes() != 0 {
		t.Fatalf("%d bytes accounted with the inbox empty", in.Bytes())
	}
	var zero Inbox
	if zero.Deliver(env) || zero.C() != nil {
		t.Fatal("the zero Inbox took a message")
	}
}
