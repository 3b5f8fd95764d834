package viewer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/viewer/web/livetest"
	"github.com/anoptic/broadside/netcode/server"
)

// TestLiveSpectator runs a game server on loopback that publishes a bot
// world's state, follows it with DialLive, and checks that the frames the
// viewer shows are the server's, tick for tick.
func TestLiveSpectator(t *testing.T) {
	w, err := livetest.Start(livetest.Options{Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	token, err := w.Token(900, server.AudienceSpectator)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cfg := context.Background(), w.Config
	step := func() uint64 {
		tick, err := w.Step()
		if err != nil {
			t.Fatal(err)
		}
		return tick
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
		l, err := DialLive(dctx, LiveOptions{Addr: w.Server.Addr(), TLS: w.ClientTLS, Token: token, Config: cfg, History: 90})
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
		want := w.Frame(tick)
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
