// Package wsfeed carries a spectator session of the session protocol
// (netcode/wire's Hello, Welcome, StateUpdate, StateAck, Goodbye) over a
// WebSocket, for browsers, which cannot open QUIC connections of their
// own (WebTransport would do, but no webtransport-go release builds
// against our quic-go). Each WebSocket binary message holds one
// SessionFrame, exactly as a QUIC stream frame holds it without its length
// prefix.
//
// Feed is the client side (it builds for js/wasm and natively); package
// demo/viewer/web holds the server side, which relays each browser's
// session to the game server as a QUIC spectator session with the token
// the browser sent, so the game server authenticates it and applies the
// spectator delay.
package wsfeed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/anoptic/broadside/netcode/wire"
)

// Subprotocol is the WebSocket subprotocol of a spectator feed.
const Subprotocol = "broadside-spectator.1"

// MaxClientMessage bounds what a spectator may send (a Hello with its
// token, state acknowledgements): the server's read limit, in bytes.
const MaxClientMessage = 2048

// ackEvery is how many ticks apart Feed acknowledges state (as
// netcode/client does by default).
const ackEvery = 3

// Feed is a spectator session over a WebSocket. It implements
// viewer.Feed.
type Feed struct {
	conn    *websocket.Conn
	welcome wire.Welcome
	updates chan wire.StateUpdate

	mu      sync.Mutex
	err     error
	lastAck uint64
	buf     []byte

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Dial opens a spectator session at url (ws:// or wss://, a
// 'broadside view' server's live endpoint) with token, a spectator token,
// and waits for the Welcome.
func Dial(ctx context.Context, url, token string) (*Feed, error) {
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		return nil, fmt.Errorf("wsfeed: %s: %w", url, err)
	}
	conn.SetReadLimit(wire.MaxSessionFrameSize)
	hello := wire.EncodeSession(nil, wire.Hello{Token: token, Protocol: wire.ProtocolVersion, Spectator: true})
	if err := conn.Write(ctx, websocket.MessageBinary, hello); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("wsfeed: %s: hello: %w", url, err)
	}
	m, err := ReadSession(ctx, conn)
	if err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("wsfeed: %s: %w", url, err)
	}
	var w wire.Welcome
	switch m := m.(type) {
	case wire.Welcome:
		w = m
	case wire.Goodbye:
		conn.CloseNow()
		return nil, fmt.Errorf("wsfeed: %s: refused: %s (code %d)", url, m.Reason, m.Code)
	default:
		conn.CloseNow()
		return nil, fmt.Errorf("wsfeed: %s: a %T before the Welcome", url, m)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	f := &Feed{conn: conn, welcome: w, updates: make(chan wire.StateUpdate, 64), ctx: runCtx, cancel: cancel, done: make(chan struct{})}
	go f.read()
	return f, nil
}

// ReadSession reads one binary message from conn and decodes it as a
// session frame (verified: wire.DecodeSession).
func ReadSession(ctx context.Context, conn *websocket.Conn) (wire.SessionMessage, error) {
	typ, b, err := conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageBinary {
		return nil, errors.New("a text message where a session frame belongs")
	}
	return wire.DecodeSession(b)
}

func (f *Feed) read() {
	defer close(f.done)
	for {
		m, err := ReadSession(f.ctx, f.conn)
		if err != nil {
			f.fail(err)
			return
		}
		switch m := m.(type) {
		case wire.StateUpdate:
			select {
			case f.updates <- m:
			default: // the viewer is behind: drop, as netcode/client does
			}
		case wire.Goodbye:
			f.fail(fmt.Errorf("the server closed the session: %s (code %d)", m.Reason, m.Code))
			return
		default:
			f.fail(fmt.Errorf("unexpected %T from the server", m))
			return
		}
	}
}

func (f *Feed) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.conn.CloseNow()
}

// Welcome returns the server's Welcome.
func (f *Feed) Welcome() wire.Welcome { return f.welcome }

// Updates delivers the state updates (dropped when not taken in time).
func (f *Feed) Updates() <-chan wire.StateUpdate { return f.updates }

// AckState tells the server the viewer holds the state of tick (every
// few ticks), so that later updates are deltas against it.
func (f *Feed) AckState(tick uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastAck != 0 && tick < f.lastAck+ackEvery {
		return nil
	}
	f.lastAck = tick
	f.buf = wire.EncodeSession(f.buf[:0], wire.StateAck{Tick: tick})
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	return f.conn.Write(ctx, websocket.MessageBinary, f.buf)
}

// Done is closed when the session ends.
func (f *Feed) Done() <-chan struct{} { return f.done }

// Err says why the session ended.
func (f *Feed) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close ends the session.
func (f *Feed) Close() error {
	f.cancel()
	err := f.conn.Close(websocket.StatusNormalClosure, "")
	<-f.done
	return err
}
