package bots

import (
	"context"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

type countingLog struct{ n chan struct{} }

func (l countingLog) Append(_ context.Context, data []byte) error {
	if _, err := wire.DecodeEnvelope(data); err != nil {
		return err
	}
	select {
	case l.n <- struct{}{}:
	default:
	}
	return nil
}

func TestBotsAgainstServer(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("bots-test-secret-0123456789")
	srv, err := server.New(server.Config{ListenAddr: "127.0.0.1:0", TLS: stls, Secret: secret,
		Log: countingLog{n: make(chan struct{}, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()

	rep, err := Run(context.Background(), Config{Server: srv.Addr(), TLS: ca.ClientTLS(), Secret: secret,
		N: 4, Rate: 20, Duration: 1500 * time.Millisecond, Behaviour: "random", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Each bot joins, then sends about Rate*Duration commands.
	if rep.Sent < 4*20 || rep.Durable != rep.Sent || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.AckP50us <= 0 || rep.AckP99us < rep.AckP50us || rep.UpBytesPerSec <= 0 {
		t.Fatalf("latency/bandwidth not measured: %+v", rep)
	}
}
