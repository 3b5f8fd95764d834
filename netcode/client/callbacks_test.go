package client_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// instantLog stores every command at once.
type instantLog struct{}

func (instantLog) AppendWithID(_ context.Context, _ msg.RecordID, data []byte) error {
	_, err := wire.DecodeEnvelope(data)
	return err
}

// tickState encodes tick's state as its 8 bytes and, for a delta, the
// base's 8 bytes after them (full states are 8 bytes long).
type tickState struct{}

func (tickState) EncodeState(dst []byte, _ uint32, tick, base uint64) ([]byte, bool) {
	dst = binary.BigEndian.AppendUint64(dst, tick)
	if base != 0 {
		dst = binary.BigEndian.AppendUint64(dst, base)
	}
	return dst, true
}

// TestCallbacksInsteadOfChannels: with OnResult and OnUpdate a client
// hands every verdict (once, for each command sent) and every state
// update of its connection straight to the callbacks, and nothing to
// Results or Updates; the updates' payloads are the caller's to keep.
func TestCallbacksInsteadOfChannels(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("client-callbacks-test-secret-01234")
	srv, err := server.New(server.Config{ListenAddr: "127.0.0.1:0", TLS: stls, Secret: secret, Log: instantLog{},
		Durability: server.Durable, State: tickState{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	tok, err := server.IssueToken(secret, server.Claims{Player: "cb", PlayerID: server.EphemeralIDBase + 7,
		Audience: server.AudiencePlayer, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	verdicts := map[uint64]int{}
	var payloads [][]byte
	var ticks []uint64
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.Dial(dctx, client.Config{Addr: srv.Addr(), TLS: ca.ClientTLS(), Token: tok,
		OnResult: func(r wire.CommandResult) {
			mu.Lock()
			defer mu.Unlock()
			if r.Status == wire.AckDurable {
				verdicts[r.Seq]++
			}
		},
		OnUpdate: func(u wire.StateUpdate) {
			mu.Lock()
			defer mu.Unlock()
			payloads = append(payloads, u.Payload)
			ticks = append(ticks, u.Tick)
		}})
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 5}); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	deadline := time.Now().Add(10 * time.Second)
	for tick := uint64(1); time.Now().Before(deadline); tick++ {
		srv.Publish(tick)
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		got, nt := len(verdicts), len(ticks)
		mu.Unlock()
		if got == n && nt >= 10 {
			last = tick
			break
		}
	}
	if last == 0 {
		mu.Lock()
		t.Fatalf("%d of %d verdicts and %d updates within 10 s", len(verdicts), n, len(ticks))
	}
	if p := c.Pending(); p != 0 {
		t.Fatalf("%d commands pending after every verdict", p)
	}
	select {
	case r := <-c.Results():
		t.Fatalf("verdict %+v on Results with OnResult set", r)
	case u := <-c.Updates():
		t.Fatalf("update of tick %d on Updates with OnUpdate set", u.Tick)
	default:
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-c.Results(); open {
		t.Fatal("Results still open after Close")
	}
	mu.Lock()
	defer mu.Unlock()
	for seq := uint64(1); seq <= n; seq++ {
		if verdicts[seq] != 1 {
			t.Fatalf("command %d: %d verdicts, want 1 (all: %v)", seq, verdicts[seq], verdicts)
		}
	}
	// Every update handed over is intact: its payload names its tick, and
	// no later read overwrote it.
	for i, p := range payloads {
		if len(p) < 8 || binary.BigEndian.Uint64(p) != ticks[i] {
			t.Fatalf("update %d of tick %d: payload %x", i, ticks[i], p)
		}
	}
}
