package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	dto "github.com/prometheus/client_model/go"
)

// fakeState encodes "viewer/tick/base" padded to size bytes; ticks below
// oldest are no longer held.
type fakeState struct {
	size   int
	oldest uint64
}

func (f *fakeState) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	if tick < f.oldest || (base != 0 && base < f.oldest) {
		return dst, false
	}
	dst = fmt.Appendf(dst, "%d/%d/%d", viewer, tick, base)
	for len(dst) < f.size {
		dst = append(dst, '.')
	}
	return dst, true
}

// publishUntil publishes tick (then later ticks: a datagram may be lost on
// loopback too) until c receives an update, and returns it.
func publishUntil(t *testing.T, s *Server, c *client.Client, tick uint64) wire.StateUpdate {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.Publish(tick)
		select {
		case u := <-c.Updates():
			return u
		case <-time.After(100 * time.Millisecond):
			tick++
		}
	}
	t.Fatal("no state update")
	panic("unreachable")
}

// TestStateFanOut: a player gets full states until it acknowledges one,
// then deltas against its acknowledged tick, with the last applied command;
// small updates go as datagrams and large ones on the stream; spectators
// get the world (viewer 0) SpectatorDelay ticks late.
func TestStateFanOut(t *testing.T) {
	for _, size := range []int{100, 5000} {
		t.Run(fmt.Sprintf("payload %d bytes", size), func(t *testing.T) {
			src := &fakeState{size: size}
			ts := startServerWith(t, Config{State: src, SpectatorDelay: 5})
			c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			spec, err := client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: ts.spectatorToken(t, "watcher", 99, time.Hour), Spectator: true})
			if err != nil {
				t.Fatal(err)
			}
			defer spec.Close()
			waitSessions(t, ts.srv, 2)

			ts.srv.NoteApplied(7, 41)
			u := publishUntil(t, ts.srv, c, 10)
			if u.Tick < 10 || u.BaseTick != 0 || u.LastAppliedSeq != 41 || !strings.HasPrefix(string(u.Payload), fmt.Sprintf("7/%d/0", u.Tick)) {
				t.Fatalf("first update %d/%d/%d %q", u.Tick, u.BaseTick, u.LastAppliedSeq, u.Payload[:10])
			}
			su := publishUntil(t, ts.srv, spec, u.Tick)
			if su.Tick < 5 || !strings.HasPrefix(string(su.Payload), fmt.Sprintf("0/%d/0", su.Tick)) {
				t.Fatalf("spectator update tick %d %q", su.Tick, su.Payload[:8])
			}
			for len(c.Updates()) > 0 {
				<-c.Updates() // updates of the spectator's publishes
			}
			ackAt := u.Tick
			if err := c.AckState(ackAt); err != nil {
				t.Fatal(err)
			}
			// The ack travels on the stream; publish until a delta shows up.
			var got wire.StateUpdate
			for tick := ackAt + 1; tick < ackAt+14; tick++ {
				got = publishUntil(t, ts.srv, c, tick)
				if got.BaseTick != 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got.BaseTick != ackAt || !strings.HasPrefix(string(got.Payload), fmt.Sprintf("7/%d/%d", got.Tick, ackAt)) {
				t.Fatalf("update after ack of %d: tick %d base %d %q", ackAt, got.Tick, got.BaseTick, got.Payload[:10])
			}
			// A base the source no longer holds falls back to a full state.
			next := got.Tick + 4 // past every tick published so far
			src.oldest = next
			u = publishUntil(t, ts.srv, c, next)
			for u.Tick < next { // an earlier tick's update, late
				u = publishUntil(t, ts.srv, c, next)
			}
			if u.BaseTick != 0 {
				t.Fatalf("base %d no longer held, yet a delta against it (tick %d)", u.BaseTick, u.Tick)
			}
			if size > transport.MaxDatagramSize && c.StreamUpdates() == 0 {
				t.Fatal("large updates did not come on the stream")
			}
			if size < transport.MaxDatagramSize && c.StreamUpdates() != 0 {
				t.Fatal("small updates came on the stream, not as datagrams")
			}
		})
	}
}

func waitSessions(t testing.TB, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		k := len(s.players) + len(s.watchers)
		s.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fewer than %d sessions", n)
}

// TestSpectatorCannotCommand: a spectator's command closes its connection
// with a protocol error.
func TestSpectatorCannotCommand(t *testing.T) {
	ts := startServerWith(t, Config{State: &fakeState{size: 10}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec, err := client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: ts.spectatorToken(t, "watcher", 99, time.Hour), Spectator: true})
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	if _, err := spec.Send(wire.GameCommand{Kind: wire.CommandJoin}); err != nil {
		t.Fatal(err)
	}
	if code := closedWith(t, spec); code != transport.CodeProtocolError {
		t.Fatalf("closed with %s", code)
	}
	if n := len(ts.log.snapshot()); n != 0 {
		t.Fatalf("%d records appended for a spectator", n)
	}
}

// BenchmarkPublish: one tick's fan-out to 20 players of 600-byte updates
// (datagrams) and 2 of 5,000 bytes (the stream), over real QUIC on
// loopback; allocs/op counts the server's (quic-go copies each datagram).
func BenchmarkPublish(b *testing.B) {
	src := &sizedState{small: 600, large: 5000, largeFrom: 1000}
	ts := startServerWith(b, Config{State: src, Logger: slog.New(slog.DiscardHandler)})
	var clients []*client.Client
	for i := range 22 {
		id := uint32(i + 1)
		if i >= 20 {
			id = uint32(1000 + i)
		}
		c, err := ts.dial(b, ts.token(b, fmt.Sprintf("p%d", i), id, time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	waitSessions(b, ts.srv, len(clients))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range clients {
		go func() { // drain the updates
			for {
				select {
				case <-c.Updates():
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts.srv.Publish(uint64(i + 1))
		if i%8 == 7 {
			time.Sleep(time.Millisecond) // let quic-go's datagram queues drain
		}
	}
}

// sizedState encodes small-byte updates for players below largeFrom and
// large-byte ones for the others.
type sizedState struct {
	small, large int
	largeFrom    uint32
}

func (f *sizedState) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	n := f.small
	if viewer >= f.largeFrom {
		n = f.large
	}
	for range n {
		dst = append(dst, byte(tick))
	}
	return dst, true
}

// TestUpdatesUpToTheDatagramCeiling: an update larger than
// transport.MaxDatagramSize but within transport.MaxDatagramCeiling goes
// as a datagram once QUIC's packets are large enough (path MTU discovery
// on loopback), and one that QUIC still refuses goes on the stream instead,
// never dropped: every tick published arrives one way or the other.
func TestUpdatesUpToTheDatagramCeiling(t *testing.T) {
	src := &fakeState{size: 1300}
	ts := startServerWith(t, Config{State: src})
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitSessions(t, ts.srv, 1)
	got := map[uint64]bool{}
	const ticks = 150
	asDatagrams, missed := 0, 0
	for tick := uint64(1); tick <= ticks; tick++ {
		streamBefore := c.StreamUpdates()
		ts.srv.Publish(tick)
		select {
		case u := <-c.Updates():
			if len(u.Payload) != src.size {
				t.Fatalf("tick %d: payload of %d bytes, want %d", u.Tick, len(u.Payload), src.size)
			}
			got[u.Tick] = true
			if c.StreamUpdates() == streamBefore {
				asDatagrams++
			}
		case <-time.After(500 * time.Millisecond):
			missed++ // a datagram lost on loopback: rare
		}
		time.Sleep(5 * time.Millisecond) // a tick's pace, roughly: path MTU discovery takes a few round trips
	}
	if missed > 5 {
		t.Fatalf("%d of %d updates never arrived", missed, ticks)
	}
	if asDatagrams == 0 {
		t.Fatalf("no update of %d bytes came as a datagram in %d ticks", src.size, ticks)
	}
	var m dto.Metric
	if err := ts.srv.metrics.updDatagram.dropped.Write(&m); err != nil {
		t.Fatal(err)
	}
	if dropped := m.GetCounter().GetValue(); dropped != 0 {
		t.Fatalf("%v datagram updates dropped: a refused one must go on the stream", dropped)
	}
	t.Logf("%d of %d updates of %d bytes as datagrams, %d on the stream", asDatagrams, ticks, src.size, c.StreamUpdates())
}
