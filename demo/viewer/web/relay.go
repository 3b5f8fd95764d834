package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/anoptic/broadside/demo/viewer/wsfeed"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/wire"
)

// MaxRelays bounds the live relays one Handler holds open (the game
// server bounds spectators too: MaxSpectators, two per token).
const MaxRelays = 64

// serveLive relays one browser's spectator session: the browser's Hello
// (its spectator token) opens a QUIC spectator session on the game server
// with that token; the server's Welcome and state updates go to the
// browser, the browser's state acknowledgements to the server.
func (h *Handler) serveLive(w http.ResponseWriter, r *http.Request) {
	if h.o.Live == nil {
		http.Error(w, "no live world here", http.StatusNotFound)
		return
	}
	h.mu.Lock()
	if h.sessions >= MaxRelays {
		h.mu.Unlock()
		http.Error(w, "too many spectators", http.StatusServiceUnavailable)
		return
	}
	h.sessions++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.sessions--
		h.mu.Unlock()
	}()
	// A feed lasts as long as the match: lift a server's write deadline
	// (serve's admin address has one), which would outlive the hijack.
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	// Same-origin only (the default): a page elsewhere cannot open feeds
	// with this server's tokens.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{wsfeed.Subprotocol}})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	if conn.Subprotocol() != wsfeed.Subprotocol {
		conn.Close(websocket.StatusPolicyViolation, "subprotocol "+wsfeed.Subprotocol+" required")
		return
	}
	conn.SetReadLimit(wsfeed.MaxClientMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if err := h.relay(ctx, conn); err != nil {
		h.log.Info("spectator relay ended", "remote", r.RemoteAddr, "err", err)
	}
}

func goodbye(ctx context.Context, conn *websocket.Conn, code uint64, reason string) {
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn.Write(wctx, websocket.MessageBinary, wire.EncodeSession(nil, wire.Goodbye{Code: code, Reason: reason}))
	conn.Close(websocket.StatusNormalClosure, "")
}

// Goodbye codes the relay sends (the game server's own Goodbyes are
// forwarded as they come).
const (
	CodeProtocol = 1 // the browser broke the protocol
	CodeRefused  = 2 // the game server refused or ended the session
)

func (h *Handler) relay(ctx context.Context, conn *websocket.Conn) error {
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	m, err := wsfeed.ReadSession(hctx, conn)
	hcancel()
	if err != nil {
		return err
	}
	hello, ok := m.(wire.Hello)
	if !ok || !hello.Spectator || hello.Protocol != wire.ProtocolVersion {
		goodbye(ctx, conn, CodeProtocol, "a spectator Hello of protocol 1 comes first")
		return errors.New("no spectator hello")
	}
	dctx, dcancel := context.WithTimeout(ctx, h.o.Live.DialTimeout)
	c, err := client.Dial(dctx, client.Config{Addr: h.o.Live.Addr, TLS: h.o.Live.TLS, Token: hello.Token, Spectator: true, StateAckEvery: 1})
	dcancel()
	if err != nil {
		goodbye(ctx, conn, CodeRefused, err.Error())
		return err
	}
	defer c.Close()
	if err := conn.Write(ctx, websocket.MessageBinary, wire.EncodeSession(nil, c.Welcome())); err != nil {
		return err
	}
	// Browser to server: state acknowledgements only.
	acks := make(chan error, 1)
	go func() {
		for {
			m, err := wsfeed.ReadSession(ctx, conn)
			if err != nil {
				acks <- err
				return
			}
			a, ok := m.(wire.StateAck)
			if !ok {
				goodbye(ctx, conn, CodeProtocol, "a spectator sends state acknowledgements only")
				acks <- errors.New("unexpected message from the browser")
				return
			}
			if err := c.AckState(a.Tick); err != nil {
				acks <- err
				return
			}
		}
	}()
	var buf []byte
	for {
		select {
		case err := <-acks:
			return err
		case <-c.Done():
			reason := "the game server ended the session"
			if err := c.Err(); err != nil {
				reason = err.Error()
			}
			goodbye(ctx, conn, CodeRefused, reason)
			return c.Err()
		case u := <-c.Updates():
			buf = wire.EncodeSession(buf[:0], u)
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := conn.Write(wctx, websocket.MessageBinary, buf)
			wcancel()
			if err != nil {
				return err
			}
		}
	}
}
