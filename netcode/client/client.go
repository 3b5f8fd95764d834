// Package client is the client library of the player server
// (netcode/server) that bots and viewers use: one authenticated session,
// commands out, verdicts and state updates in. It knows no particular game.
package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// Config configures a player (or bot, or spectator) connection.
type Config struct {
	// Addr is the server's UDP address.
	Addr string
	// TLS must trust the server's certificate (transport.ClientTLS, or a
	// DevCA's ClientTLS).
	TLS *tls.Config
	// Token is the player's signed token (server.IssueToken, 'broadside token').
	Token     string
	Spectator bool
}

// Client is one session with a game server.
type Client struct {
	ep      *transport.Endpoint
	conn    *transport.Conn
	st      *transport.Stream
	welcome wire.Welcome

	mu      sync.Mutex
	nextSeq uint64
	buf     []byte

	streamUpdates atomic.Uint64

	results chan wire.CommandResult
	updates chan wire.StateUpdate
	done    chan struct{}
	err     error
}

// Dial connects, authenticates and waits for the server's Welcome.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	ep, err := transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: cfg.TLS,
		ALPN: []string{wire.ALPN}, MaxFrameSize: wire.MaxSessionFrameSize, EnableDatagrams: true})
	if err != nil {
		return nil, err
	}
	c := &Client{ep: ep, results: make(chan wire.CommandResult, 1024), updates: make(chan wire.StateUpdate, 64), done: make(chan struct{})}
	if err := c.handshake(ctx, cfg); err != nil {
		ep.Close()
		return nil, err
	}
	go c.readLoop()
	go c.readDatagrams()
	return c, nil
}

func (c *Client) handshake(ctx context.Context, cfg Config) error {
	conn, err := c.ep.Dial(ctx, cfg.Addr)
	if err != nil {
		return fmt.Errorf("client: dial %s: %w", cfg.Addr, err)
	}
	c.conn = conn
	st, err := conn.OpenStream(ctx)
	if err != nil {
		return err
	}
	c.st = st
	if err := st.WriteFrame(wire.EncodeSession(nil, wire.Hello{Token: cfg.Token, Protocol: wire.ProtocolVersion, Spectator: cfg.Spectator})); err != nil {
		return err
	}
	if err := st.Flush(); err != nil {
		return err
	}
	frame, err := st.ReadFrame(nil)
	if err != nil {
		if code, _, ok := transport.ErrorCodeOf(err); ok {
			return fmt.Errorf("client: server closed the connection (%s): %w", code, err)
		}
		return fmt.Errorf("client: waiting for welcome: %w", err)
	}
	m, err := wire.DecodeSession(frame)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case wire.Welcome:
		c.welcome = m
		return nil
	case wire.Goodbye:
		return fmt.Errorf("client: server refused the session (%s): %s", transport.ErrorCode(m.Code), m.Reason)
	}
	return fmt.Errorf("client: unexpected %T instead of a welcome", m)
}

// Welcome returns what the server said when the session opened.
func (c *Client) Welcome() wire.Welcome { return c.welcome }

// Send sends a command with the next sequence number (set in cmd.Seq
// unless the caller set one) and returns that number.
func (c *Client) Send(cmd wire.GameCommand) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cmd.Seq == 0 {
		c.nextSeq++
		cmd.Seq = c.nextSeq
	} else {
		c.nextSeq = max(c.nextSeq, cmd.Seq)
	}
	c.buf = wire.EncodeGameCommand(c.buf[:0], cmd)
	return cmd.Seq, c.st.WriteFrame(c.buf)
}

// AckState tells the server this client holds the state of tick, so that
// later updates are deltas against it.
func (c *Client) AckState(tick uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = wire.EncodeSession(c.buf[:0], wire.StateAck{Tick: tick})
	return c.st.WriteFrame(c.buf)
}

// SendRaw writes an arbitrary frame (tests of the server's defences).
func (c *Client) SendRaw(frame []byte) error { return c.st.WriteFrame(frame) }

// Results delivers the server's verdicts on commands (durable, refused).
func (c *Client) Results() <-chan wire.CommandResult { return c.results }

// Updates delivers state updates (from datagrams and the stream, in
// arrival order; updates the caller does not take in time are dropped). It
// is never closed: watch Done.
func (c *Client) Updates() <-chan wire.StateUpdate { return c.updates }

// Done is closed when the session ends; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the session ended (nil while it is open).
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close ends the session.
func (c *Client) Close() error {
	c.conn.CloseWithCode(transport.CodeNormal, "bye")
	<-c.done
	return c.ep.Close()
}

func (c *Client) readLoop() {
	defer close(c.done)
	defer close(c.results)
	buf := make([]byte, 0, 4096)
	for {
		frame, err := c.st.ReadFrame(buf[:0])
		if err != nil {
			c.err = err
			return
		}
		m, err := wire.DecodeSession(frame)
		if err != nil {
			c.err = err
			c.conn.CloseWithCode(transport.CodeProtocolError, "malformed frame from server")
			return
		}
		switch m := m.(type) {
		case wire.CommandResult:
			select {
			case c.results <- m:
			default: // nobody reads results: drop
			}
		case wire.StateUpdate:
			select {
			case c.updates <- m:
			default:
			}
			c.streamUpdates.Add(1)
		case wire.Goodbye:
			c.err = fmt.Errorf("client: server said goodbye (%s): %s", transport.ErrorCode(m.Code), m.Reason)
		}
	}
}

// readDatagrams delivers the state updates that arrive as datagrams.
func (c *Client) readDatagrams() {
	ctx := c.conn.Context()
	for {
		b, err := c.conn.ReceiveDatagram(ctx)
		if err != nil {
			return
		}
		m, err := wire.DecodeSession(b)
		if err != nil {
			c.conn.CloseWithCode(transport.CodeProtocolError, "malformed datagram from server")
			return
		}
		u, ok := m.(wire.StateUpdate)
		if !ok {
			c.conn.CloseWithCode(transport.CodeProtocolError, "unexpected datagram from server")
			return
		}
		select {
		case c.updates <- u:
		case <-c.done:
			return
		default:
		}
	}
}

// Stats returns the bytes this session sent and received on the wire
// (QUIC packets, headers and encryption included).
func (c *Client) Stats() (sent, received uint64) {
	s := c.conn.QUIC().ConnectionStats()
	return s.BytesSent, s.BytesReceived
}

// StreamUpdates returns how many state updates came on the stream rather
// than as datagrams (those too large for one).
func (c *Client) StreamUpdates() uint64 { return c.streamUpdates.Load() }
