package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// heldLog is a memLog whose appends, while held, store the record and
// then wait (until released or their context ends) before returning: the
// command is in the log but the server has not acknowledged it, the moment
// a crash or a lost connection makes a client resend.
type heldLog struct {
	memLog
	mu      sync.Mutex
	held    bool
	release chan struct{}
}

func newHeldLog() *heldLog { return &heldLog{release: make(chan struct{})} }

func (l *heldLog) hold() {
	l.mu.Lock()
	l.held, l.release = true, make(chan struct{})
	l.mu.Unlock()
}

func (l *heldLog) unhold() {
	l.mu.Lock()
	if l.held {
		l.held = false
		close(l.release)
	}
	l.mu.Unlock()
}

func (l *heldLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	if err := l.memLog.AppendWithID(ctx, id, data); err != nil {
		return err
	}
	l.mu.Lock()
	held, release := l.held, l.release
	l.mu.Unlock()
	if !held {
		return nil
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *heldLog) count() int {
	l.memLog.mu.Lock()
	defer l.memLog.mu.Unlock()
	return len(l.envs)
}

// onceEach checks that the log holds player's commands 1..n, each once.
func (l *heldLog) onceEach(t *testing.T, player uint32, n int) {
	t.Helper()
	l.memLog.mu.Lock()
	defer l.memLog.mu.Unlock()
	seen := map[uint64]int{}
	clients := map[uint64]bool{}
	for i, e := range l.envs {
		if e.Player != player || e.ClientSeq != l.ids[i].Seq {
			t.Fatalf("record %d: envelope %+v, id %v", i, e, l.ids[i])
		}
		seen[e.ClientSeq]++
		clients[l.ids[i].Client] = true
	}
	for s := uint64(1); s <= uint64(n); s++ {
		if seen[s] != 1 {
			t.Fatalf("command %d is in the log %d times (want once); log holds %d records", s, seen[s], len(l.envs))
		}
	}
	if len(l.envs) != n || len(clients) != 1 {
		t.Fatalf("log holds %d records under %d client ids, want %d under one", len(l.envs), len(clients), n)
	}
}

// resumeRig runs servers one after another on one address and one log.
type resumeRig struct {
	t      *testing.T
	ca     *transport.DevCA
	stls   *tls.Config
	log    *heldLog
	addr   string
	srv    *Server
	cancel context.CancelFunc
	done   chan error
}

func newResumeRig(t *testing.T) *resumeRig {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	r := &resumeRig{t: t, ca: ca, stls: stls, log: newHeldLog(), addr: "127.0.0.1:0"}
	t.Cleanup(func() { r.log.unhold(); r.stop() })
	return r
}

// start starts a server (a new instance: no state but the log's).
func (r *resumeRig) start(d Durability) {
	r.t.Helper()
	srv, err := New(Config{ListenAddr: r.addr, TLS: r.stls, Secret: testSecret, Log: r.log, Durability: d,
		Limits: IntakeLimits{Rate: 1000, Burst: 100}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = srv.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	r.srv, r.cancel, r.done = srv, cancel, make(chan error, 1)
	go func() { r.done <- srv.Serve(ctx) }()
}

// stop stops the server as a crash would for its clients: connections
// close, appends in flight are abandoned.
func (r *resumeRig) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

func (r *resumeRig) dial(player uint32) *client.Client {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Addr: r.addr, TLS: r.ca.ClientTLS(),
		TokenSource: func(context.Context) (string, error) {
			return IssueToken(testSecret, Claims{Player: "ada", PlayerID: player, Audience: AudiencePlayer, Expires: time.Now().Add(time.Minute)})
		},
		Reconnect: client.Reconnect{Attempts: 20, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

func sendN(t *testing.T, c *client.Client, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: int32(i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// results collects verdicts until every seq in 1..n has one.
func results(t *testing.T, c *client.Client, n int) map[uint64]wire.AckStatus {
	t.Helper()
	got := map[uint64]wire.AckStatus{}
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case r, ok := <-c.Results():
			if !ok {
				t.Fatalf("session ended after %d of %d verdicts: %v", len(got), n, c.Err())
			}
			if _, dup := got[r.Seq]; dup {
				t.Fatalf("command %d acknowledged twice", r.Seq)
			}
			got[r.Seq] = r.Status
		case <-timeout:
			t.Fatalf("%d of %d commands acknowledged (pending %d, reconnects %d)", len(got), n, c.Pending(), c.Reconnects())
		}
	}
	return got
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestResumeAfterCutConnection cuts a player's connection on the server
// side while 10 of its commands are in the log but unacknowledged: the
// client reconnects, resends them, and the log holds every command once.
func TestResumeAfterCutConnection(t *testing.T) {
	r := newResumeRig(t)
	r.start(Durable)
	c := r.dial(7)
	r.log.hold()
	sendN(t, c, 10)
	waitFor(t, "10 commands in the log", func() bool { return r.log.count() == 10 })
	r.srv.mu.Lock()
	sess := r.srv.players[7]
	r.srv.mu.Unlock()
	sess.conn.CloseWithCode(transport.CodeInternalError, "cut by the test")
	r.log.unhold()
	got := results(t, c, 10)
	sendN(t, c, 10) // the resumed session continues its numbering
	for s, st := range results(t, c, 10) {
		got[s] = st
	}
	for s := uint64(1); s <= 20; s++ {
		if got[s] != wire.AckDurable {
			t.Fatalf("command %d: %v", s, got[s])
		}
	}
	if c.Reconnects() != 1 || c.Resent() != 10 {
		t.Fatalf("reconnects %d, resent %d; want 1 and 10", c.Reconnects(), c.Resent())
	}
	r.log.onceEach(t, 7, 20)
}

// TestResendToRestartedServer stops the server while commands are in the
// log but unacknowledged, starts a new server instance on the same address
// and log (configured Replicated), and checks that the client resumes, its
// resent commands are stored once, and the new server's acknowledgements
// say replicated.
func TestResendToRestartedServer(t *testing.T) {
	r := newResumeRig(t)
	r.start(Durable)
	c := r.dial(9)
	sendN(t, c, 5)
	first := results(t, c, 5)
	r.log.hold()
	sendN(t, c, 10)
	waitFor(t, "15 commands in the log", func() bool { return r.log.count() == 15 })
	r.stop()
	r.log.unhold()
	sendN(t, c, 5) // sent while the server is down: queued, then sent
	r.start(Replicated)
	got := results(t, c, 15)
	for s := uint64(1); s <= 5; s++ {
		if first[s] != wire.AckDurable {
			t.Fatalf("command %d from the first server: %v", s, first[s])
		}
	}
	for s := uint64(6); s <= 20; s++ {
		if got[s] != wire.AckReplicated {
			t.Fatalf("command %d from the second server: %v, want replicated", s, got[s])
		}
	}
	if c.Reconnects() != 1 || c.Resent() < 10 {
		t.Fatalf("reconnects %d, resent %d; want 1 and at least 10", c.Reconnects(), c.Resent())
	}
	r.log.onceEach(t, 9, 20)
}

// TestNoReconnectByDefault: the zero Reconnect keeps today's behaviour,
// the session ends with its connection.
func TestNoReconnectByDefault(t *testing.T) {
	ts := startServer(t, IntakeLimits{})
	c, err := ts.dial(t, ts.token(t, "bo", 3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts.srv.mu.Lock()
	sess := ts.srv.players[3]
	ts.srv.mu.Unlock()
	sess.conn.CloseWithCode(transport.CodeInternalError, "cut by the test")
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session outlived its connection without Reconnect")
	}
	if c.Reconnects() != 0 {
		t.Fatalf("%d reconnects", c.Reconnects())
	}
}

// TestCommandIDs pins the id scheme: deterministic, per player and
// session, and disjoint from cmdlog's random ids (bit 62) and the engine's
// (top byte 0xB5).
func TestCommandIDs(t *testing.T) {
	a := CommandID(7, 42, 3)
	if a != CommandID(7, 42, 3) || a.Seq != 3 {
		t.Fatalf("not deterministic: %v", a)
	}
	seen := map[uint64]bool{}
	for p := uint32(0); p < 50; p++ {
		for s := uint64(0); s < 50; s++ {
			id := PlayerClientID(p, s)
			if id>>61 != 0b100 {
				t.Fatalf("player %d session %d: id %#x without the tag", p, s, id)
			}
			if id&(1<<62) != 0 || id>>56 == 0xB5 {
				t.Fatalf("id %#x in another writer's space", id)
			}
			if seen[id] {
				t.Fatalf("id %#x twice", id)
			}
			seen[id] = true
		}
	}
}
