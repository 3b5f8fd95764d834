package mesh

import (
	"net"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/netcode/transport"
)

// TestPendingBytes (issue 16, finding 7): messages held for a peer being
// dialled are bounded in bytes, not only in count.
func TestPendingBytes(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	_, cli, err := DevNodeTLS(ca, ClientIDBase)
	if err != nil {
		t.Fatal(err)
	}
	// A UDP socket that never answers: the dial stays in progress.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	m, err := New(Config{Self: ClientIDBase + 1, ClientTLS: cli, Inbox: node.NewInbox(),
		Peers: map[msg.NodeID]string{1: pc.LocalAddr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := msg.Record{ID: msg.RecordID{Client: 1, Seq: 1}, Data: make([]byte, 1<<20)}
	const sent = 20
	for range sent {
		m.Send(msg.Envelope{From: ClientIDBase + 1, To: 1, Msg: msg.Append{View: 1, Records: []msg.Record{rec}}})
	}
	m.mu.Lock()
	held, bytes := len(m.pending[1]), m.pendingBytes[1]
	m.mu.Unlock()
	if bytes > maxPendingBytes || held*(1<<20) > maxPendingBytes {
		t.Fatalf("%d messages (%d bytes) held for a peer being dialled, over %d bytes", held, bytes, maxPendingBytes)
	}
	if held == 0 || m.Dropped() < sent-uint64(held) {
		t.Fatalf("held %d, dropped %d of %d", held, m.Dropped(), sent)
	}
}

// TestQueueBytes: a link's send queue is bounded in bytes.
func TestQueueBytes(t *testing.T) {
	l := &link{wake: make(chan struct{}, 1)}
	big := msg.Append{Records: []msg.Record{{Data: make([]byte, 4<<20)}}}
	m := &Mesh{}
	n := 0
	for m.sendOn(l, big) {
		n++
		if n > 1000 {
			t.Fatal("queue never full")
		}
	}
	if l.queueBytes > maxQueuedBytes || n*(4<<20) > maxQueuedBytes {
		t.Fatalf("%d messages, %d bytes queued, over %d", n, l.queueBytes, maxQueuedBytes)
	}
}
