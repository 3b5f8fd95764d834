// Package livetest runs a small live Broadside world for the viewer's
// tests: a bot match stepped at the game's tick rate, its state fanned out
// by a real netcode/server game server on loopback (QUIC, tokens, the
// spectator delay). Only tests import it.
package livetest

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/replay/world"
)

// Options configure Start.
type Options struct {
	// Delay is the server's spectator delay in ticks.
	Delay uint64
	// Ships and Seed make the bot match (defaults 12 and 5).
	Ships int
	Seed  uint64
	// Manual leaves the stepping to the caller (World.Step), as fast as
	// it likes, instead of stepping at the tick rate.
	Manual bool
}

// World is a running world and its game server.
type World struct {
	Server *server.Server
	Secret []byte
	Config broadside.Config
	Delay  uint64
	// ClientTLS trusts the server.
	ClientTLS *tls.Config

	match  *broadside.BotMatch
	prev   *broadside.Frame // the last frame stepped (Step's goroutine only)
	tick   atomic.Uint64
	mu     sync.Mutex
	frames map[uint64]*broadside.Frame
	enc    broadside.StateEncoder

	cancel context.CancelFunc
	done   chan struct{}
	served chan error
}

// keep is how many ticks of frames the world holds.
const keep = 900

type discardLog struct{}

func (discardLog) AppendWithID(context.Context, msg.RecordID, []byte) error { return nil }

// EncodeState implements server.StateSource.
func (w *World) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.frames[tick]
	if cur == nil {
		return dst, false
	}
	var b *broadside.Frame
	if base != 0 {
		if b = w.frames[base]; b == nil {
			return dst, false
		}
	}
	return w.enc.Encode(dst, cur, b, viewer), true
}

// Start starts the world and its server on 127.0.0.1 (a free port).
func Start(o Options) (*World, error) {
	if o.Ships == 0 {
		o.Ships = 12
	}
	if o.Seed == 0 {
		o.Seed = 5
	}
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		return nil, err
	}
	cfg := broadside.Config{Seed: o.Seed, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 4}
	conf, err := cfg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	w := &World{Secret: []byte("viewer-live-test-secret-0123456789"), Config: cfg, Delay: o.Delay, ClientTLS: ca.ClientTLS(),
		frames: map[uint64]*broadside.Frame{}, done: make(chan struct{}), served: make(chan error, 1)}
	srv, err := server.New(server.Config{ListenAddr: "127.0.0.1:0", TLS: stls, Secret: w.Secret, Log: discardLog{},
		State: w, TickRate: broadside.TickRate, Tick: w.tick.Load, World: conf, SpectatorDelay: o.Delay,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	w.Server = srv
	if w.match, err = broadside.NewBotMatch(cfg, o.Ships, o.Seed, world.LocalConfig{}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.served <- srv.Serve(ctx) }()
	if o.Manual {
		close(w.done)
	} else {
		go w.run(ctx)
	}
	return w, nil
}

// run steps the match at the tick rate.
func (w *World) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(time.Second / broadside.TickRate)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := w.Step(); err != nil {
			return
		}
	}
}

// Step steps the match one tick and publishes the tick's frame, returning
// the tick. With Options.Manual the caller steps; otherwise only the
// world does.
func (w *World) Step() (uint64, error) {
	if err := w.match.Step(); err != nil {
		return 0, err
	}
	f := broadside.NewFrame(w.match.World().Tick())
	for i := range w.match.World().Shards() {
		f.AddSector(w.match.Sector(i))
	}
	f.Seal(w.prev, 0)
	w.prev = f
	w.mu.Lock()
	w.frames[f.Tick] = f
	if f.Tick > keep {
		delete(w.frames, f.Tick-keep)
	}
	w.mu.Unlock()
	w.tick.Store(f.Tick)
	w.Server.Publish(f.Tick)
	return f.Tick, nil
}

// Tick returns the newest tick the world stepped (what players see).
func (w *World) Tick() uint64 { return w.tick.Load() }

// Frame returns the state of tick, if still held.
func (w *World) Frame(tick uint64) *broadside.Frame {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames[tick]
}

// Token issues a token for player id with audience a.
func (w *World) Token(id uint32, a server.Audience) (string, error) {
	return server.IssueToken(w.Secret, server.Claims{Player: "watcher", PlayerID: id, Audience: a, Expires: time.Now().Add(time.Hour)})
}

// Close stops the world and its server.
func (w *World) Close() {
	w.cancel()
	<-w.done
	<-w.served
	w.match.Close()
}
