package server

import (
	"context"
	"testing"
	"time"

	"github.com/anoptic/broadside/internal/udpproxy"
	"github.com/anoptic/broadside/netcode/client"
)

// TestSilentDownlinkDoesNotStallPublish: a player whose downlink goes
// dead stops acknowledging the server's packets, so its connection's
// congestion window fills and quic-go's datagram queue (32) with it, and
// a send to it would wait until the connection ends. Publish must not
// wait for it: every other player keeps getting its updates.
func TestSilentDownlinkDoesNotStallPublish(t *testing.T) {
	ts := startServerWith(t, Config{State: &fakeState{size: 1000}})
	proxy, err := udpproxy.New(ts.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	silent, err := client.Dial(ctx, client.Config{Addr: proxy.Addr(), TLS: ts.client, Token: ts.token(t, "mute", 8, time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	good, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	waitSessions(t, ts.srv, 2)
	publishUntil(t, ts.srv, silent, 1)
	proxy.SetSilent(true)

	// 300 ticks at 200 Hz: far more than the silent connection's window
	// and queue hold.
	var slowest time.Duration
	got := 0
	for tick := uint64(100); tick < 400; tick++ {
		start := time.Now()
		done := make(chan struct{})
		go func() { ts.srv.Publish(tick); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("Publish of tick %d blocked for 3 s on the silent player", tick)
		}
		slowest = max(slowest, time.Since(start))
	drain:
		for {
			select {
			case <-good.Updates():
				got++
			default:
				break drain
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(time.Second)
	for got < 250 && time.Now().Before(deadline) {
		select {
		case <-good.Updates():
			got++
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("slowest Publish %v; the good player got %d of 300 updates", slowest, got)
	if got < 250 {
		t.Fatalf("the good player got %d of 300 updates while another's downlink was silent", got)
	}
}
