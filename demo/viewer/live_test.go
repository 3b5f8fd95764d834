package viewer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/replay/world"
)

// frameStore is a game server's state fan-out in miniature: sealed frames
// by tick, encoded with broadside's StateEncoder.
type frameStore struct {
	mu     sync.Mutex
	frames map[uint64]*broadside.Frame
	enc    broadside.StateEncoder
}

func (s *frameStore) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.frames[tick]
	if cur == nil {
		return dst, false
	}
	var b *broadside.Frame
	if base != 0 {
		if b = s.frames[base]; b == nil {
			return dst, false
		}
	}
	return s.enc.Encode(dst, cur, b, viewer), true
}

type discardLog struct{}

func (discardLog) AppendWithID(context.Context, msg.RecordID, []byte) error { return nil }

// TestLiveSpectator runs a game server on loopback that publishes a bot
// world's state, follows it with DialLive, and checks that the frames the
// viewer shows are the server's, tick for tick.
func TestLiveSpectator(t *testing.T) {
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("viewer-live-test-secret-0123456789")
	store := &frameStore{frames: map[uint64]*broadside.Frame{}}
	srv, err := server.New(server.Config{ListenAddr: "127.0.0.1:0", TLS: stls, Secret: secret, Log: discardLog{},
		State: store, TickRate: broadside.TickRate, Tick: func() uint64 { return 0 }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	token, err := server.IssueToken(secret, server.Claims{Player: "viewer", PlayerID: 900, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	cfg := broadside.Config{Seed: 5, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 4}
	match, err := broadside.NewBotMatch(cfg, 12, 5, world.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer match.Close()
	var prev *broadside.Frame
	step := func() uint64 {
		if err := match.Step(); err != nil {
			t.Fatal(err)
		}
		f := broadside.NewFrame(match.World().Tick())
		for i := range match.World().Shards() {
			f.AddSector(match.Sector(i))
		}
		f.Seal(prev, 0)
		prev = f
		store.mu.Lock()
		store.frames[f.Tick] = f
		store.mu.Unlock()
		srv.Publish(f.Tick)
		return f.Tick
	}

	// The spectator connects while the world runs.
	type dialed struct {
		l   *Live
		err error
	}
	dc := make(chan dialed, 1)
	go func() {
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		defer dcancel()
		l, err := DialLive(dctx, LiveOptions{Addr: srv.Addr(), TLS: ca.ClientTLS(), Token: token, Config: cfg, History: 90})
		dc <- dialed{l, err}
	}()
	var live *Live
	deadline := time.Now().Add(30 * time.Second)
	for live == nil && time.Now().Before(deadline) {
		step()
		time.Sleep(3 * time.Millisecond)
		select {
		case d := <-dc:
			if d.err != nil {
				t.Fatal(d.err)
			}
			live = d.l
		default:
		}
	}
	if live == nil {
		t.Fatal("DialLive did not return")
	}
	defer live.Close()
	m := NewModel(live, screenW, screenH)
	if !m.Playing() {
		t.Fatal("a live viewer starts playing")
	}
	first, _ := live.Ticks()
	for time.Now().Before(deadline) {
		if _, last := live.Ticks(); last >= first+120 {
			break
		}
		step()
		time.Sleep(3 * time.Millisecond)
	}
	f0, last := live.Ticks()
	if last < first+120 {
		t.Fatalf("followed only ticks %d..%d", first, last)
	}
	if last-f0+1 > 90 {
		t.Fatalf("holds %d ticks, History is 90", last-f0+1)
	}
	// Following: the viewer shows the last tick.
	m.Update(1.0 / 60)
	if m.Tick() != last {
		t.Fatalf("following viewer at tick %d, last %d", m.Tick(), last)
	}
	// Every frame held equals the server's frame of its tick.
	held := 0
	for tick := f0; tick <= last; tick++ {
		if err := live.Seek(tick); err != nil {
			t.Fatal(err)
		}
		got := live.Frame()
		if got.Tick != tick {
			continue // a dropped update: the frame before is shown
		}
		held++
		store.mu.Lock()
		want := store.frames[tick]
		store.mu.Unlock()
		if len(got.Ships) != len(want.Ships) || len(got.Balls) != len(want.Balls) {
			t.Fatalf("tick %d: %d ships %d balls, server has %d and %d", tick, len(got.Ships), len(got.Balls), len(want.Ships), len(want.Balls))
		}
		for i, v := range want.Ships {
			if g := got.Ships[i]; g.ID != v.ID || g.X != v.X || g.Y != v.Y || g.Heading != v.Heading || g.Hull != v.Hull || g.Sunk != v.Sunk {
				t.Fatalf("tick %d: ship %+v, server has %+v", tick, g, v)
			}
		}
	}
	if held < 60 {
		t.Fatalf("only %d of ticks %d..%d held", held, f0, last)
	}
	// Seeking back stops following; the panel says lineage is not live.
	m.SeekTo(f0 + 10)
	if m.Tick() > f0+10 {
		t.Fatalf("seek back: tick %d", m.Tick())
	}
	v := m.Source().Frame().Ships[0]
	m.Select(v.ID)
	if _, err := m.Explanation(); !errors.Is(err, ErrNoLineage) {
		t.Fatalf("live Why: %v, want ErrNoLineage", err)
	}
	sc := m.Scene()
	if !strings.Contains(strings.Join(sc.Texts(m.PanelRect()), " "), "admin address") {
		t.Fatal("the panel does not say why there is no lineage")
	}
	if sc.Count(RoleShip) != len(m.Source().Frame().Ships) {
		t.Fatal("live ships not drawn")
	}
	m.Key(KeyLast)
	step()
	time.Sleep(50 * time.Millisecond)
	m.Update(1.0 / 60)
	if _, last := live.Ticks(); m.Tick() != last {
		t.Fatalf("End did not follow the live tail: tick %d, last %d", m.Tick(), last)
	}
}
