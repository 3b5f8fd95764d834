package server

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"golang.org/x/time/rate"
)

// memLog is an Appender that keeps what it was given, once per record id,
// as cmdlog's replicas do (cmdlog/dedup).
type memLog struct {
	mu    sync.Mutex
	envs  []wire.Envelope
	ids   []msg.RecordID
	dedup *dedup.Table
}

func (l *memLog) AppendWithID(_ context.Context, id msg.RecordID, data []byte) error {
	e, err := wire.DecodeEnvelope(data)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dedup == nil {
		t := dedup.NewTable()
		l.dedup = &t
	}
	if !l.dedup.Add(id) {
		return nil
	}
	l.envs = append(l.envs, e)
	l.ids = append(l.ids, id)
	return nil
}

func (l *memLog) snapshot() []wire.Envelope {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wire.Envelope(nil), l.envs...)
}

type testServer struct {
	srv    *Server
	log    *memLog
	client *tls.Config
	cancel context.CancelFunc
	done   chan error
}

func startServer(t *testing.T, limits IntakeLimits) *testServer {
	t.Helper()
	return startServerWith(t, Config{Limits: limits, Durability: Durable})
}

func startServerWith(t testing.TB, cfg Config) *testServer {
	t.Helper()
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	ml := &memLog{}
	cfg.ListenAddr, cfg.TLS, cfg.Secret = "127.0.0.1:0", stls, testSecret
	if cfg.Log == nil {
		cfg.Log = ml
	} else {
		ml = nil // the caller's log
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, log: ml, client: ca.ClientTLS(), cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ts.done
	})
	return ts
}

func (ts *testServer) token(t testing.TB, name string, id uint32, ttl time.Duration) string {
	t.Helper()
	return issue(t, Claims{Player: name, PlayerID: id, Audience: AudiencePlayer, Expires: time.Now().Add(ttl)})
}

// spectatorToken issues a spectator token.
func (ts *testServer) spectatorToken(t *testing.T, name string, id uint32, ttl time.Duration) string {
	t.Helper()
	return issue(t, Claims{Player: name, PlayerID: id, Audience: AudienceSpectator, Expires: time.Now().Add(ttl)})
}

func issue(t testing.TB, c Claims) string {
	t.Helper()
	tok, err := IssueToken(testSecret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (ts *testServer) dial(t testing.TB, token string) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: token})
}

// closedWith waits for the session to end and returns the code it closed with.
func closedWith(t *testing.T, c *client.Client) transport.ErrorCode {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed by the server")
	}
	code, _, ok := transport.ErrorCodeOf(c.Err())
	if !ok {
		t.Fatalf("session ended without an application code: %v", c.Err())
	}
	return code
}

func TestServerAcceptsAndStampsCommands(t *testing.T) {
	ts := startServer(t, IntakeLimits{Rate: 1000, Burst: 100})
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if w := c.Welcome(); w.PlayerID != 7 || w.Player != "ada" {
		t.Fatalf("welcome %+v", w)
	}
	for i := 0; i < 20; i++ {
		if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: int32(i), Player: 7}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	for len(seen) < 20 {
		select {
		case r := <-c.Results():
			if r.Status != wire.AckDurable {
				t.Fatalf("command %d: %v", r.Seq, r.Status)
			}
			seen[r.Seq] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 20 commands acknowledged", len(seen))
		}
	}
	envs := ts.log.snapshot()
	if len(envs) != 20 {
		t.Fatalf("%d envelopes appended", len(envs))
	}
	for _, e := range envs {
		cmd, err := wire.DecodeGameCommand(e.Payload)
		if err != nil || e.Kind != wire.EnvelopePlayerCommand || e.Player != 7 || e.ClientSeq != cmd.Seq {
			t.Fatalf("envelope %+v (%v)", e, err)
		}
	}
}

func TestServerRejectsBadInputPerConnection(t *testing.T) {
	ts := startServer(t, IntakeLimits{Rate: 20, Burst: 5, FloodFactor: 2})
	// A well-behaved player stays connected through everything below.
	good, err := ts.dial(t, ts.token(t, "good", 1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	t.Run("wrong token", func(t *testing.T) {
		tok, _ := IssueToken([]byte("some-other-secret-xx"), Claims{Player: "eve", PlayerID: 9, Audience: AudiencePlayer, Expires: time.Now().Add(time.Hour)})
		if _, err := ts.dial(t, tok); err == nil || !strings.Contains(err.Error(), "unauthorized") {
			t.Fatalf("dial with a foreign token: %v", err)
		}
	})
	t.Run("expired token", func(t *testing.T) {
		if _, err := ts.dial(t, ts.token(t, "old", 10, -time.Minute)); err == nil || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("dial with an expired token: %v", err)
		}
	})
	cases := []struct {
		name string
		send func(c *client.Client) error
		want transport.ErrorCode
	}{
		{"malformed frame", func(c *client.Client) error { return c.SendRaw([]byte("this is not a flatbuffer at all")) }, transport.CodeProtocolError},
		{"unknown message type", func(c *client.Client) error {
			return c.SendRaw(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: 5}))
		}, transport.CodeProtocolError},
		{"oversized frame", func(c *client.Client) error { return c.SendRaw(make([]byte, MaxPlayerFrame+1)) }, transport.CodeFrameTooLarge},
		{"command for another player", func(c *client.Client) error {
			_, err := c.Send(wire.GameCommand{Kind: wire.CommandFire, Side: 1, Player: 424242})
			return err
		}, transport.CodeUnauthorized},
		{"replayed sequence number", func(c *client.Client) error {
			c.Send(wire.GameCommand{Seq: 5, Kind: wire.CommandFire})
			_, err := c.Send(wire.GameCommand{Seq: 5, Kind: wire.CommandFire})
			return err
		}, transport.CodeProtocolError},
		{"second hello", func(c *client.Client) error {
			return c.SendRaw(wire.EncodeSession(nil, wire.Hello{Token: "x", Protocol: wire.ProtocolVersion}))
		}, transport.CodeProtocolError},
		{"state acknowledgement flood", func(c *client.Client) error {
			for i := uint64(1); i <= 2000; i++ {
				// Raw: the client library only acknowledges ticks it
				// received.
				if err := c.SendRaw(wire.EncodeSession(nil, wire.StateAck{Tick: i})); err != nil {
					return nil
				}
			}
			return nil
		}, transport.CodeRateLimited},
		{"flood", func(c *client.Client) error {
			for i := 0; i < 500; i++ {
				if _, err := c.Send(wire.GameCommand{Kind: wire.CommandThrottle, Value: 1}); err != nil {
					return nil // closed mid-flood
				}
			}
			return nil
		}, transport.CodeRateLimited},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ts.dial(t, ts.token(t, "bad", uint32(100+i), time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := tc.send(c); err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("send: %v", err)
			}
			if code := closedWith(t, c); code != tc.want {
				t.Fatalf("closed with %s, want %s (%v)", code, tc.want, c.Err())
			}
		})
	}
	// The good player is still served.
	seq, err := good.Send(wire.GameCommand{Kind: wire.CommandFire, Side: -1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-good.Results():
		if r.Seq != seq || r.Status != wire.AckDurable {
			t.Fatalf("good player's command: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("good player's command not acknowledged after the others misbehaved")
	}
}

func TestIntakeRateLimitRefusesThenCuts(t *testing.T) {
	in := NewIntake(3, IntakeLimits{Rate: rate.Limit(10), Burst: 2, FloodFactor: 2})
	now := time.Unix(100, 0)
	var accepted, refused int
	for i := 1; i <= 60; i++ {
		v := in.Frame(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: uint64(i), Kind: wire.CommandRudder}), now)
		switch {
		case v.Err != nil:
			if !errors.Is(v.Err, ErrFlood) {
				t.Fatalf("command %d: %v", i, v.Err)
			}
			if accepted != 2 || refused != 20 {
				t.Fatalf("cut after %d accepted and %d refused, want 2 and 20", accepted, refused)
			}
			return
		case v.Accepted:
			accepted++
		default:
			refused++
		}
	}
	t.Fatal("a flood of 60 commands in one instant was never cut")
}

func FuzzIntake(f *testing.F) {
	f.Add(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire, Side: 1}))
	f.Add(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 2, Kind: wire.CommandAck, AckTick: 9, Player: 7}))
	f.Add(wire.EncodeSession(nil, wire.Hello{Token: "x", Protocol: 1}))
	f.Add(wire.EncodeSession(nil, wire.StateAck{Tick: 12}))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		in := NewIntake(7, IntakeLimits{})
		v := in.Frame(frame, time.Unix(0, 0))
		if v.StateAck != 0 && (v.Accepted || v.Append != nil || v.Err != nil) {
			t.Fatalf("a state acknowledgement must not be appended: %+v", v)
		}
		if v.Accepted {
			e, err := wire.DecodeEnvelope(v.Append)
			if err != nil || e.Player != 7 || e.Kind != wire.EnvelopePlayerCommand {
				t.Fatalf("accepted frame gave envelope %+v (%v)", e, err)
			}
		}
		if v.Err != nil && CodeOf(v.Err) == transport.CodeInternalError {
			t.Fatalf("intake error without a proper code: %v", v.Err)
		}
	})
}

// TestClientsShareAnEndpoint: clients dialled from one socket
// (client.Config.Endpoint, as the bot harness does) are separate sessions
// to the server, each with its own acknowledgements; closing one leaves
// the socket and the other session working.
func TestClientsShareAnEndpoint(t *testing.T) {
	ts := startServer(t, IntakeLimits{Rate: 1000, Burst: 100})
	base := client.Config{Addr: ts.srv.Addr(), TLS: ts.client}
	ep, err := client.NewEndpoint(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cs []*client.Client
	for i, name := range []string{"ada", "bea", "cy"} {
		cfg := base
		cfg.Endpoint, cfg.Token = ep, ts.token(t, name, uint32(7+i), time.Hour)
		c, err := client.Dial(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if w := c.Welcome(); w.PlayerID != uint32(7+i) {
			t.Fatalf("client %d welcomed as %+v", i, w)
		}
		cs = append(cs, c)
	}
	send := func(c *client.Client, player uint32, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: int32(i), Player: player}); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < n; got++ {
			select {
			case r := <-c.Results():
				if r.Status != wire.AckDurable {
					t.Fatalf("player %d: command %d: %v", player, r.Seq, r.Status)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("player %d: %d of %d commands acknowledged", player, got, n)
			}
		}
	}
	for i, c := range cs {
		send(c, uint32(7+i), 5)
	}
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cs[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("closed client not done")
	}
	send(cs[1], 8, 5)
	if got := len(ts.log.snapshot()); got != 20 {
		t.Fatalf("%d envelopes appended, want 20", got)
	}
	// A client dialled after another's Close still works on the socket.
	cfg := base
	cfg.Endpoint, cfg.Token = ep, ts.token(t, "dee", 10, time.Hour)
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send(c, 10, 3)
}
