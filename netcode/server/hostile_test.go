package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// playOne sends one command on c and waits for its acknowledgement.
func playOne(t *testing.T, c *client.Client) {
	t.Helper()
	seq, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 3})
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case r := <-c.Results():
			if r.Seq != seq {
				continue
			}
			if r.Status != wire.AckDurable {
				t.Fatalf("command %d: %v", seq, r.Status)
			}
			return
		case <-c.Done():
			t.Fatalf("session ended: %v", c.Err())
		case <-time.After(10 * time.Second):
			t.Fatalf("command %d not acknowledged", seq)
		}
	}
}

func dialCfg(t *testing.T, ts *testServer, cfg client.Config) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Addr, cfg.TLS = ts.srv.Addr(), ts.client
	return client.Dial(ctx, cfg)
}

// TestTokenAudience: a player token cannot open a spectator session (it
// would see the whole world), nor a spectator token a player session.
func TestTokenAudience(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	_, err := dialCfg(t, ts, client.Config{Token: ts.token(t, "ada", 7, time.Hour), Spectator: true})
	if err == nil || !strings.Contains(err.Error(), "wrong audience") || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("spectator session with a player token: %v", err)
	}
	_, err = dialCfg(t, ts, client.Config{Token: ts.spectatorToken(t, "eve", 8, time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "wrong audience") {
		t.Fatalf("player session with a spectator token: %v", err)
	}
	spec, err := dialCfg(t, ts, client.Config{Token: ts.spectatorToken(t, "eve", 8, time.Hour), Spectator: true})
	if err != nil {
		t.Fatal(err)
	}
	spec.Close()
	if n := len(ts.log.snapshot()); n != 0 {
		t.Fatalf("%d records appended", n)
	}
}

// TestTakeoverNeedsNewerToken: one live session per player; a replayed
// or older token is refused with CodeStaleToken and leaves the live
// session alone; a newer token takes over; the newest token resumes only
// its own session, once that session's connection is gone.
func TestTakeoverNeedsNewerToken(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	now := time.Now()
	tok := func(at time.Duration) string {
		return issue(t, Claims{Player: "ada", PlayerID: 7, Audience: AudiencePlayer, IssuedAt: now.Add(at), Expires: now.Add(time.Hour)})
	}
	older, t1, t2 := tok(-2*time.Second), tok(-time.Second), tok(0)
	first, err := dialCfg(t, ts, client.Config{Token: t1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for name, token := range map[string]string{"replayed": t1, "older": older} {
		_, err := dialCfg(t, ts, client.Config{Token: token})
		if err == nil || !strings.Contains(err.Error(), "stale or replayed") || !strings.Contains(err.Error(), CodeStaleToken.String()) {
			t.Fatalf("%s token: %v", name, err)
		}
	}
	playOne(t, first) // still served
	const session = 0x5e55
	second, err := dialCfg(t, ts, client.Config{Token: t2, Session: session})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the newer token did not take over")
	}
	playOne(t, second)
	if _, err := dialCfg(t, ts, client.Config{Token: t1}); err == nil {
		t.Fatal("the first token came back after a newer one")
	}
	if _, err := dialCfg(t, ts, client.Config{Token: t2, Session: session}); err == nil {
		t.Fatal("the live session's token opened a second connection")
	}
	second.Close()
	// Wait until the server saw the session end, then resume it.
	var resumed *client.Client
	for i := 0; i < 200 && resumed == nil; i++ {
		resumed, err = dialCfg(t, ts, client.Config{Token: t2, Session: session})
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if resumed == nil {
		t.Fatalf("the newest token did not resume its session: %v", err)
	}
	defer resumed.Close()
	if _, err := dialCfg(t, ts, client.Config{Token: t2, Session: session + 1}); err == nil {
		t.Fatal("the token opened another session")
	}
}

// attacker is a raw QUIC endpoint on another loopback address (so that
// per-address caps count it apart from the good client on 127.0.0.1).
func attacker(t *testing.T, ts *testServer, datagrams bool) *transport.Endpoint {
	t.Helper()
	ep, err := transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.3:0", ClientTLS: ts.client, ALPN: []string{wire.ALPN},
		EnableDatagrams: datagrams, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// TestPreHelloFloodRefused: connections that never send Hello are capped
// per address (the excess refused before its handshake) and closed at the
// Hello deadline with an application code; one stream only before Hello;
// a good client keeps playing throughout, and once the flood is closed
// its address may connect again.
func TestPreHelloFloodRefused(t *testing.T) {
	ts := startServerWith(t, Config{Durability: Durable, HandshakeTimeout: time.Second,
		Admission: AdmissionLimits{MaxPreHelloPerAddr: 4, MaxPreHello: 8, RetryAbove: 1000}})
	good, err := ts.dial(t, ts.token(t, "good", 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	ep := attacker(t, ts, false)
	var held []*transport.Conn
	refused := 0
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := ep.Dial(ctx, ts.srv.Addr())
		cancel()
		if err != nil {
			refused++
			continue
		}
		held = append(held, c)
	}
	if len(held) > 4 || refused < 16 {
		t.Fatalf("%d connections without Hello held, %d refused; want at most 4 held", len(held), refused)
	}
	if len(held) == 0 {
		t.Fatal("no connection admitted at all")
	}
	// One stream before Hello: the second is over the peer's limit.
	if _, err := held[0].QUIC().OpenStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := held[0].QUIC().OpenStream(); err == nil {
		t.Fatal("a second stream was allowed before Hello")
	}
	playOne(t, good)
	for _, c := range held {
		select {
		case <-c.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a connection without Hello outlived the Hello deadline")
		}
		if code, remote, ok := transport.ErrorCodeOf(context.Cause(c.Context())); !ok || !remote || code != transport.CodeProtocolError {
			t.Fatalf("closed with %v (remote %v, ok %v): %v", code, remote, ok, context.Cause(c.Context()))
		}
	}
	playOne(t, good)
	if n := counterValue(ts.srv.admit.refused.WithLabelValues("pre_hello_per_addr")); n < 16 {
		t.Fatalf("refusals counted: %v", n)
	}
	// Released: the address may connect again.
	var again *transport.Conn
	for i := 0; i < 100 && again == nil; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		again, _ = ep.Dial(ctx, ts.srv.Addr())
		cancel()
	}
	if again == nil {
		t.Fatal("the address stayed refused after its connections closed")
	}
	if conns, pre := ts.srv.admit.counts(); conns < 2 || pre < 1 {
		t.Fatalf("admission counts %d conns, %d before Hello", conns, pre)
	}
}

// TestRetryUnderLoad: with the Retry threshold passed, a connection must
// validate its address first, and a good client still plays.
func TestRetryUnderLoad(t *testing.T) {
	ts := startServerWith(t, Config{Durability: Durable, Admission: AdmissionLimits{RetryAbove: -1}})
	c, err := ts.dial(t, ts.token(t, "good", 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	playOne(t, c)
	if n := counterValue(ts.srv.admit.validated); n < 1 {
		t.Fatalf("%v connections validated their address", n)
	}
}

// TestClientDatagramsRefused: the server does not accept datagrams (the
// protocol sends none from clients), so a client cannot send any, while
// the server still sends state as datagrams (TestStateFanOut).
func TestClientDatagramsRefused(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	ep := attacker(t, ts, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := ep.Dial(ctx, ts.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if c.QUIC().ConnectionState().SupportsDatagrams.Remote {
		t.Fatal("the server advertises datagram support")
	}
	if err := c.SendDatagram(make([]byte, 1000)); !errors.Is(err, transport.ErrDatagramsDisabled) {
		t.Fatalf("client datagram: %v", err)
	}
	if err := c.QUIC().SendDatagram(make([]byte, 1000)); err == nil {
		t.Fatal("quic-go sent a datagram the server does not accept")
	}
}

// TestJunkAfterCommandRefused: a command padded with junk bytes closes the
// connection with a protocol error and is not logged.
func TestJunkAfterCommandRefused(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	c, err := ts.dial(t, ts.token(t, "pad", 5, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire, Side: 1})
	frame = append(frame, bytes.Repeat([]byte{0xAA}, 900)...)
	if err := c.SendRaw(frame); err != nil {
		t.Fatal(err)
	}
	if code := closedWith(t, c); code != transport.CodeProtocolError {
		t.Fatalf("closed with %s", code)
	}
	if n := len(ts.log.snapshot()); n != 0 {
		t.Fatalf("%d records logged", n)
	}
	// Small padding (inside a frame the verifier accepts) too.
	in := NewIntake(5, IntakeLimits{})
	pad := append(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire}), 0, 0, 0, 0, 0, 0, 0, 0)
	if v := in.Frame(pad, time.Now()); !errors.Is(v.Err, ErrProtocol) || v.Append != nil {
		t.Fatalf("8 padding bytes: %+v", v)
	}
}

// TestOversizedCountedApart: oversized frames and commands close with
// CodeFrameTooLarge and are counted under it, not as protocol errors,
// before Hello and after.
func TestOversizedCountedApart(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	c, err := ts.dial(t, ts.token(t, "big", 5, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A GameCommand of 1.5 KiB: within the frame limit, over the
	// command's.
	frame := wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire})
	frame = append(frame, make([]byte, 1500)...)
	c.SendRaw(frame)
	if code := closedWith(t, c); code != transport.CodeFrameTooLarge {
		t.Fatalf("oversized command closed with %s", code)
	}
	// An oversized first frame, before Hello.
	ep := attacker(t, ts, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := ep.Dial(ctx, ts.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.QUIC().OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte{0, 0, 0x40, 0}) // a 16 KiB frame announced
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("oversized hello not refused")
	}
	if code, _, _ := transport.ErrorCodeOf(context.Cause(conn.Context())); code != transport.CodeFrameTooLarge {
		t.Fatalf("oversized hello closed with %s", code)
	}
	// The count follows the close on the server's goroutine: wait for it.
	tooLarge := ts.srv.metrics.closed.WithLabelValues(transport.CodeFrameTooLarge.String())
	for i := 0; i < 500 && counterValue(tooLarge) < 2; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := counterValue(ts.srv.metrics.closed.WithLabelValues(transport.CodeFrameTooLarge.String())); n != 2 {
		t.Fatalf("%v closes counted as frame too large", n)
	}
	if n := counterValue(ts.srv.metrics.closed.WithLabelValues(transport.CodeProtocolError.String())); n != 0 {
		t.Fatalf("%v closes counted as protocol errors", n)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRejectionWarningsRateLimited: 40 rejected connections within a
// frozen second log at most the burst of warnings; all are counted.
func TestRejectionWarningsRateLimited(t *testing.T) {
	var logs syncBuffer
	frozen := time.Now()
	ts := startServerWith(t, Config{Durability: Durable, Now: func() time.Time { return frozen },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	bad := issue(t, Claims{Player: "eve", PlayerID: 9, Audience: AudiencePlayer, Expires: frozen.Add(-time.Minute)})
	for range 40 {
		if _, err := ts.dial(t, bad); err == nil {
			t.Fatal("expired token accepted")
		}
	}
	for i := 0; counterValue(ts.srv.metrics.closed.WithLabelValues(transport.CodeUnauthorized.String())) < 40; i++ {
		if i > 500 {
			t.Fatal("rejections not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "closing player connection"); n > 20 || n == 0 {
		t.Fatalf("%d warnings for 40 rejections", n)
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
