// Package client is the client library of the player server
// (netcode/server) that bots and viewers use: one authenticated session,
// commands out, verdicts and state updates in. It knows no particular game.
//
// A session can outlive its connection (Config.Reconnect): after a lost
// connection or a server restart the client reconnects with backoff, sends
// Hello with the same session id and a fresh token, resends every command
// the server did not acknowledge, in sequence order, and resumes the state
// from the full state the server sends a connection with no acknowledged
// base. The server gives a command the log id (player, session, seq), so a
// resent command is stored once.
package client

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/quic-go/quic-go"
)

// Config configures a player (or bot, or spectator) connection. Its zero
// Reconnect keeps one connection: the session ends with it.
type Config struct {
	// Addr is the server's UDP address.
	Addr string
	// TLS must trust the server's certificate (transport.ClientTLS, or a
	// DevCA's ClientTLS).
	TLS *tls.Config
	// Token is the player's signed token (server.IssueToken, 'broadside token').
	Token string
	// TokenSource, if set, is asked for the token of every connection (the
	// first and each reconnection) instead of Token: tokens expire.
	TokenSource func(ctx context.Context) (string, error)
	Spectator   bool
	// Session is the session id sent in Hello (0: a random one, the usual
	// choice). It must be new for each client process, whose sequence
	// numbers start from 1: a reused id makes its commands look like
	// duplicates of the earlier process's.
	Session uint64
	// Reconnect makes the session survive its connection (zero: it does
	// not).
	Reconnect Reconnect
	// StateAckEvery is how many ticks apart AckState tells the server
	// (default 3; 1: every update it is given). Each acknowledgement is a
	// packet on its own, the biggest share of a playing client's uplink
	// and of the server's receive work; the server then bases deltas on a
	// tick up to this much older, which the client still holds (its
	// StateTracker keeps 16 ticks, and servers base deltas at most 15
	// back).
	StateAckEvery int
	// StateAckDelay is how long an acknowledgement of state may wait to
	// ride in the packet of the next command the client sends (default 20
	// ms; negative: sent at once). A playing client then costs the server
	// one packet less per acknowledgement.
	StateAckDelay time.Duration
	// Endpoint, if set, is the UDP socket (and QUIC transport) the client
	// dials from, which other clients may share: a bot harness's many
	// connections then cost one receive loop per socket, reading several
	// packets per system call, instead of one socket and loop each. Close
	// leaves it open (its owner closes it). Make it with NewEndpoint, so
	// that its timeouts are the ones Dial would pick for this Config.
	Endpoint *transport.Endpoint
	// AcksOnStream asks the server for every acknowledgement on the
	// stream, as clients did before acknowledgements rode in state
	// updates (Hello.AcksInState false; for comparisons and tests).
	AcksOnStream bool
	// OnResult, if set, is given every verdict Results would deliver,
	// instead of Results (which then only closes when the session ends),
	// on the goroutine that read it: no channel and no goroutine of the
	// caller's between the connection and the caller. It is called from
	// both of a connection's readers (the stream's and the datagrams'),
	// so possibly concurrently with itself and with OnUpdate, and it must
	// not block: the connection reads nothing while it runs.
	OnResult func(wire.CommandResult)
	// OnUpdate, if set, is given every state update of the current
	// connection, instead of Updates (which then delivers nothing), on
	// the goroutine that read it, with the same rules as OnResult. An
	// update read on a connection that is no longer the session's (one
	// lost, its reader not yet stopped) is dropped, as Updates drops
	// those still queued when a connection is lost. The update's Payload
	// belongs to the callee.
	OnUpdate func(wire.StateUpdate)
}

// DefaultStateAckDelay is the default Config.StateAckDelay.
const DefaultStateAckDelay = 20 * time.Millisecond

// Reconnect configures reconnection. Its zero value disables it.
type Reconnect struct {
	// Attempts bounds the consecutive failed attempts after a connection
	// is lost (0: never reconnect); a successful one resets the count.
	Attempts int
	// MinBackoff is the wait before the first attempt (default 50ms); it
	// doubles after each failed attempt, up to MaxBackoff (default 2s).
	// Each wait is jittered to between half and all of it.
	MinBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one attempt: dial, handshake, Welcome (default
	// 3s).
	AttemptTimeout time.Duration
	// IdleTimeout is how long a silent server is given before the
	// connection counts as lost (default 3s with reconnection on; without,
	// quic-go's 30s). A crashed server sends nothing, so this is how long
	// a client takes to notice one.
	IdleTimeout time.Duration
	// Rand draws the jitter (default: a generator seeded with the session
	// id, so that clients spread out and a run replays).
	Rand *rand.Rand
}

func (r *Reconnect) defaults(session uint64) {
	if r.MinBackoff <= 0 {
		r.MinBackoff = 50 * time.Millisecond
	}
	if r.MaxBackoff < r.MinBackoff {
		r.MaxBackoff = max(2*time.Second, r.MinBackoff)
	}
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = 3 * time.Second
	}
	if r.IdleTimeout <= 0 {
		r.IdleTimeout = 3 * time.Second
	}
	if r.Rand == nil {
		r.Rand = rand.New(rand.NewPCG(session, 0x6a6974746572121))
	}
}

// Backoff returns the wait before reconnection attempt n (from 0): MinBackoff
// doubled n times, at most MaxBackoff, times a jitter factor in [0.5, 1]
// drawn from Rand.
func (r *Reconnect) Backoff(n int) time.Duration {
	d := r.MinBackoff
	for i := 0; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.MaxBackoff)
	return d/2 + time.Duration(r.Rand.Float64()*float64(d/2))
}

// Client is one session with a game server, over one connection or, with
// Reconnect, a succession of them.
type Client struct {
	cfg   Config
	ep    *transport.Endpoint
	ownEP bool // ep is the client's own (not Config.Endpoint): Close closes it

	// mu serialises writes on the stream: Send, AckState and the resend
	// after a reconnection. It is never held while waiting for the server
	// to read (only while writing), and the stream reader never takes it.
	mu      sync.Mutex
	link    *link // the current connection; nil while reconnecting
	nextSeq uint64
	buf     []byte

	// cur is link for readers that must not wait for a writer (Stats,
	// Close); welcome is the latest Welcome.
	cur     atomic.Pointer[link]
	welcome atomic.Pointer[wire.Welcome]

	// pmu guards pending: the encoded commands not yet acknowledged, by
	// sequence number (resent after a reconnection).
	pmu     sync.Mutex
	pending map[uint64][]byte
	// low is at most the lowest sequence number in pending (under pmu):
	// Send finds the lowest one by walking up from it, instead of going
	// through the whole map for every command.
	low uint64

	streamUpdates atomic.Uint64
	ackedInState  atomic.Uint64
	reconnects    atomic.Uint64
	resent        atomic.Uint64
	closing       atomic.Bool
	// ctx ends at Close: it stops a reconnection under way.
	ctx    context.Context
	cancel context.CancelFunc
	// bytes of the connections that ended (Stats adds the current one's).
	pastSent, pastReceived   atomic.Uint64
	pastPktSent, pastPktRecv atomic.Uint64

	results chan wire.CommandResult
	updates chan wire.StateUpdate
	done    chan struct{}
	err     error
}

// link is one connection of the session.
type link struct {
	conn *transport.Conn
	st   *transport.Stream
	// firstTick is the tick of the first state update received on this
	// connection (0: none yet). Acknowledged bases must be of this
	// connection: a server that restarted may not hold older ticks, or
	// may hold another world's under the same numbers.
	firstTick atomic.Uint64
	// lastAck is the newest tick AckState took for this link; ackDue, if
	// not 0, is that tick still waiting for a command to ride with, and
	// ackTimer sends it alone after StateAckDelay (all under the client's
	// mu).
	lastAck  uint64
	ackDue   uint64
	ackTimer *time.Timer
}

// Dial connects, authenticates and waits for the server's Welcome.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Session == 0 {
		cfg.Session = newSessionID()
	}
	if cfg.Reconnect.Attempts > 0 {
		cfg.Reconnect.defaults(cfg.Session)
	}
	ep, own := cfg.Endpoint, cfg.Endpoint == nil
	if own {
		var err error
		if ep, err = NewEndpoint(cfg); err != nil {
			return nil, err
		}
	}
	c := &Client{cfg: cfg, ep: ep, ownEP: own, pending: map[uint64][]byte{},
		results: make(chan wire.CommandResult, 1024), updates: make(chan wire.StateUpdate, 64), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	l, w, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		if own {
			ep.Close()
		}
		return nil, err
	}
	ended := c.install(l, w)
	go c.run(l, ended)
	return c, nil
}

// NewEndpoint returns the endpoint Dial makes for cfg (cfg.Endpoint
// unset): a UDP socket on 127.0.0.1 with the idle timeout and keep-alives
// of cfg.Reconnect. Several clients of the same Config may share it
// (Config.Endpoint); its owner closes it after their Close.
func NewEndpoint(cfg Config) (*transport.Endpoint, error) {
	tcfg := transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: cfg.TLS,
		ALPN: []string{wire.ALPN}, MaxFrameSize: wire.MaxSessionFrameSize, EnableDatagrams: true}
	if r := cfg.Reconnect; r.Attempts > 0 {
		r.defaults(cfg.Session)
		tcfg.IdleTimeout = r.IdleTimeout
		tcfg.KeepAlivePeriod = r.IdleTimeout / 3
	}
	return transport.NewEndpoint(tcfg)
}

// newSessionID returns a random non-zero session id.
func newSessionID() uint64 {
	for {
		var b [8]byte
		crand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// errRefused marks a handshake the server answered with a Goodbye.
var errRefused = errors.New("client: server refused the session")

// connect dials, sends Hello and waits for the Welcome.
func (c *Client) connect(ctx context.Context) (*link, wire.Welcome, error) {
	token := c.cfg.Token
	if c.cfg.TokenSource != nil {
		t, err := c.cfg.TokenSource(ctx)
		if err != nil {
			return nil, wire.Welcome{}, fmt.Errorf("client: token: %w", err)
		}
		token = t
	}
	conn, err := c.ep.Dial(ctx, c.cfg.Addr)
	if err != nil {
		return nil, wire.Welcome{}, fmt.Errorf("client: dial %s: %w", c.cfg.Addr, err)
	}
	l := &link{conn: conn}
	w, err := c.handshake(ctx, l, token)
	if err != nil {
		conn.CloseWithCode(transport.CodeNormal, "handshake failed")
		return nil, wire.Welcome{}, err
	}
	return l, w, nil
}

func (c *Client) handshake(ctx context.Context, l *link, token string) (wire.Welcome, error) {
	st, err := l.conn.OpenStream(ctx)
	if err != nil {
		return wire.Welcome{}, err
	}
	l.st = st
	hello := wire.Hello{Token: token, Protocol: wire.ProtocolVersion, Spectator: c.cfg.Spectator, Session: c.cfg.Session, AcksInState: !c.cfg.AcksOnStream}
	if err := st.WriteFrame(wire.EncodeSession(nil, hello)); err != nil {
		return wire.Welcome{}, err
	}
	if err := st.Flush(); err != nil {
		return wire.Welcome{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		st.SetReadDeadline(dl)
		defer st.SetReadDeadline(time.Time{})
	}
	frame, err := st.ReadFrame(nil)
	if err != nil {
		if code, _, ok := transport.ErrorCodeOf(err); ok {
			return wire.Welcome{}, fmt.Errorf("client: server closed the connection (%s): %w", code, err)
		}
		return wire.Welcome{}, fmt.Errorf("client: waiting for welcome: %w", err)
	}
	m, err := wire.DecodeSession(frame)
	if err != nil {
		return wire.Welcome{}, err
	}
	switch m := m.(type) {
	case wire.Welcome:
		return m, nil
	case wire.Goodbye:
		return wire.Welcome{}, fmt.Errorf("%w (%s): %s", errRefused, transport.ErrorCode(m.Code), m.Reason)
	}
	return wire.Welcome{}, fmt.Errorf("client: unexpected %T instead of a welcome", m)
}

// install makes l the session's connection: it starts l's readers, then
// resends every pending command in sequence order before any new command
// can be written (the server requires increasing sequence numbers on a
// connection). The returned channel yields why l ended.
func (c *Client) install(l *link, w wire.Welcome) <-chan error {
	ended := make(chan error, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.link = l
	c.cur.Store(l)
	c.welcome.Store(&w)
	go func() { ended <- c.readStream(l) }()
	go c.readDatagrams(l)
	c.pmu.Lock()
	seqs := make([]uint64, 0, len(c.pending))
	for s := range c.pending {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	frames := make([][]byte, len(seqs))
	for i, s := range seqs {
		frames[i] = c.pending[s]
	}
	c.pmu.Unlock()
	for _, f := range frames {
		if err := l.st.WriteFrame(f); err != nil {
			break // this connection is lost too: the next one resends
		}
		c.resent.Add(1)
	}
	return ended
}

// run supervises the session: when a connection ends it reconnects (if
// configured and sensible) or ends the session.
func (c *Client) run(l *link, ended <-chan error) {
	defer close(c.done)
	defer close(c.results)
	for {
		err := <-ended
		l.conn.CloseWithCode(transport.CodeNormal, "connection lost")
		c.mu.Lock()
		c.link = nil
		c.cur.Store(nil)
		s := l.conn.QUIC().ConnectionStats()
		c.pastSent.Add(s.BytesSent)
		c.pastReceived.Add(s.BytesReceived)
		c.pastPktSent.Add(s.PacketsSent)
		c.pastPktRecv.Add(s.PacketsReceived)
		c.mu.Unlock()
		if !c.shouldReconnect(err) {
			c.err = err
			return
		}
		// Updates of the lost connection are stale.
		for drained := false; !drained; {
			select {
			case <-c.updates:
			default:
				drained = true
			}
		}
		nl, w, rerr := c.reconnect()
		if rerr != nil {
			c.err = fmt.Errorf("client: connection lost (%v), not resumed: %w", err, rerr)
			return
		}
		c.reconnects.Add(1)
		l, ended = nl, c.install(nl, w)
		if c.closing.Load() {
			// Close ran during the reconnection and did not see nl (it
			// closes the link it finds after setting closing): with a
			// shared endpoint nothing else would close it.
			nl.conn.CloseWithCode(transport.CodeNormal, "bye")
		}
	}
}

// shouldReconnect says whether a connection that ended with err is worth
// another: not after Close, not when the server closed it for something
// the client did (a new connection would fare the same), not when another
// connection of the player took over.
func (c *Client) shouldReconnect(err error) bool {
	if c.closing.Load() || c.cfg.Reconnect.Attempts <= 0 {
		return false
	}
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) && appErr.Remote {
		switch transport.ErrorCode(appErr.ErrorCode) {
		case transport.CodeProtocolError, transport.CodeFrameTooLarge, transport.CodeUnauthorized, transport.CodeRateLimited:
			return false
		case transport.CodeNormal:
			return appErr.ErrorMessage != wire.ReasonReplaced
		}
	}
	return true
}

// reconnect tries up to Attempts times, with backoff.
func (c *Client) reconnect() (*link, wire.Welcome, error) {
	r := &c.cfg.Reconnect
	var last error
	for n := 0; n < r.Attempts; n++ {
		t := time.NewTimer(r.Backoff(n))
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return nil, wire.Welcome{}, errors.New("client: closed")
		}
		ctx, cancel := context.WithTimeout(c.ctx, r.AttemptTimeout)
		l, w, err := c.connect(ctx)
		cancel()
		if err == nil {
			return l, w, nil
		}
		last = err
	}
	return nil, wire.Welcome{}, fmt.Errorf("client: %d reconnection attempts failed, the last: %w", r.Attempts, last)
}

// Welcome returns what the server said when the session opened (after a
// reconnection: when it resumed).
func (c *Client) Welcome() wire.Welcome { return *c.welcome.Load() }

// Session returns the session id sent in Hello.
func (c *Client) Session() uint64 { return c.cfg.Session }

// Send sends a command with the next sequence number (set in cmd.Seq
// unless the caller set one) and returns that number. Sequence numbers of a
// session should be dense from 1 (the log's duplicate detection keeps a
// window per session). The command stays pending until the server's
// verdict; with Reconnect, a command sent while the connection is lost is
// sent after the reconnection, and Send reports no error for it.
func (c *Client) Send(cmd wire.GameCommand) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cmd.Seq == 0 {
		c.nextSeq++
		cmd.Seq = c.nextSeq
	} else {
		c.nextSeq = max(c.nextSeq, cmd.Seq)
	}
	c.pmu.Lock()
	if cmd.Seq < c.low {
		c.low = cmd.Seq // a caller's own, lower number
	}
	if cmd.Settled == 0 {
		// Every command below the lowest one without a verdict has its
		// verdict here: the server's dedup floor may pass those (and only
		// those), since none of them is ever sent again.
		cmd.Settled = c.lowestPending(cmd.Seq)
	}
	frame := wire.EncodeGameCommand(nil, cmd)
	c.pending[cmd.Seq] = frame
	c.pmu.Unlock()
	if c.link == nil {
		if c.cfg.Reconnect.Attempts > 0 && !c.closing.Load() {
			return cmd.Seq, nil
		}
		return cmd.Seq, errors.New("client: session ended")
	}
	if l := c.link; l.ackDue != 0 {
		// The waiting state acknowledgement rides in this command's
		// packet: buffered just before it on the same stream, so that
		// the command's write hands both to QUIC at once (two writes
		// would let the connection send the first alone).
		tick := l.ackDue
		l.ackDue = 0
		l.ackTimer.Stop()
		c.buf = wire.EncodeSession(c.buf[:0], wire.StateAck{Tick: tick})
		_ = l.st.BufferFrame(c.buf) // a failed write fails the command's too
	}
	err := c.link.st.WriteFrame(frame)
	if err != nil && c.cfg.Reconnect.Attempts > 0 {
		err = nil // resent after the reconnection
	}
	return cmd.Seq, err
}

// lowestPending returns the lowest sequence number in pending, or seq if
// none is lower, and moves low up to it (pmu held). Numbers are dense, so
// the walk is amortised over the commands sent; after a jump (a caller's
// own numbers) the map is searched instead.
func (c *Client) lowestPending(seq uint64) uint64 {
	if seq-c.low > 2*uint64(len(c.pending))+64 {
		low := seq
		for s := range c.pending {
			low = min(low, s)
		}
		c.low = low
		return low
	}
	for c.low < seq {
		if _, ok := c.pending[c.low]; ok {
			break
		}
		c.low++
	}
	return c.low
}

// AckState tells the server this client holds the state of tick, so that
// later updates are deltas against it. A tick not received on the current
// connection (one from before a reconnection) is not sent: the server's
// first update after a reconnection is a full state.
func (c *Client) AckState(tick uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link == nil {
		return nil
	}
	if first := c.link.firstTick.Load(); first == 0 || tick < first {
		return nil
	}
	every := uint64(c.cfg.StateAckEvery)
	if every == 0 {
		every = 3
	}
	if l := c.link.lastAck; l != 0 && tick < l+every {
		return nil
	}
	c.link.lastAck = tick
	delay := c.cfg.StateAckDelay
	if delay == 0 {
		delay = DefaultStateAckDelay
	}
	if delay < 0 {
		return c.writeStateAckLocked(c.link, tick)
	}
	l := c.link
	waiting := l.ackDue != 0 // its timer runs: the newer tick takes its place
	l.ackDue = tick
	switch {
	case waiting:
	case l.ackTimer == nil:
		l.ackTimer = time.AfterFunc(delay, func() { c.flushStateAck(l) })
	default:
		l.ackTimer.Reset(delay)
	}
	return nil
}

// flushStateAck sends l's waiting state acknowledgement alone (no command
// came to ride with).
func (c *Client) flushStateAck(l *link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link != l || l.ackDue == 0 {
		return
	}
	tick := l.ackDue
	l.ackDue = 0
	_ = c.writeStateAckLocked(l, tick) // a failed write ends the link: its reader sees it
}

// writeStateAckLocked writes a state acknowledgement of tick on l (under
// c.mu).
func (c *Client) writeStateAckLocked(l *link, tick uint64) error {
	c.buf = wire.EncodeSession(c.buf[:0], wire.StateAck{Tick: tick})
	return l.st.WriteFrame(c.buf)
}

// SendRaw writes an arbitrary frame (tests of the server's defences).
func (c *Client) SendRaw(frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link == nil {
		return errors.New("client: not connected")
	}
	return c.link.st.WriteFrame(frame)
}

// Results delivers the server's verdicts on commands (durable, replicated,
// refused). It is closed when the session ends.
func (c *Client) Results() <-chan wire.CommandResult { return c.results }

// Updates delivers state updates (from datagrams and the stream, in
// arrival order; updates the caller does not take in time are dropped, and
// so are those still queued when a connection is lost). It is never closed:
// watch Done.
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
	c.closing.Store(true)
	c.cancel()
	if l := c.cur.Load(); l != nil {
		l.conn.CloseWithCode(transport.CodeNormal, "bye")
	}
	// A reconnection under way stops at its next step (c.ctx ended; an
	// own endpoint closed).
	var err error
	if c.ownEP {
		err = c.ep.Close()
	}
	<-c.done
	return err
}

// readStream reads l's stream until it ends and returns why.
func (c *Client) readStream(l *link) error {
	buf := make([]byte, 0, 4096)
	var acked []wire.CommandResult
	var goodbye error
	for {
		frame, err := l.st.ReadFrame(buf[:0])
		if err != nil {
			if goodbye != nil {
				return fmt.Errorf("%w (%v)", goodbye, err)
			}
			return err
		}
		m, err := wire.DecodeSession(frame)
		if err != nil {
			l.conn.CloseWithCode(transport.CodeProtocolError, "malformed frame from server")
			return err
		}
		switch m := m.(type) {
		case wire.CommandResult:
			c.settle(m)
		case wire.StateUpdate:
			acked = m.Acked.Results(acked[:0])
			for _, r := range acked {
				if c.settle(r) {
					c.ackedInState.Add(1)
				}
			}
			l.firstTick.CompareAndSwap(0, m.Tick)
			c.streamUpdates.Add(1)
			if c.cfg.OnUpdate != nil {
				if c.cur.Load() == l {
					c.cfg.OnUpdate(m)
				}
				continue
			}
			select {
			case c.updates <- m:
			default:
			}
		case wire.Goodbye:
			goodbye = fmt.Errorf("client: server said goodbye (%s): %s", transport.ErrorCode(m.Code), m.Reason)
		}
	}
}

// readDatagrams delivers the state updates that arrive as datagrams on l.
func (c *Client) readDatagrams(l *link) {
	ctx := l.conn.Context()
	var acked []wire.CommandResult
	for {
		b, err := l.conn.ReceiveDatagram(ctx)
		if err != nil {
			return
		}
		m, err := wire.DecodeSession(b)
		if err != nil {
			l.conn.CloseWithCode(transport.CodeProtocolError, "malformed datagram from server")
			return
		}
		u, ok := m.(wire.StateUpdate)
		if !ok {
			l.conn.CloseWithCode(transport.CodeProtocolError, "unexpected datagram from server")
			return
		}
		// Acknowledgements ride in state datagrams (Hello.AcksInState),
		// repeated until the server sees a StateAck of a tick that
		// carried them: settle drops the repeats.
		acked = u.Acked.Results(acked[:0])
		for _, r := range acked {
			if c.settle(r) {
				c.ackedInState.Add(1)
			}
		}
		l.firstTick.CompareAndSwap(0, u.Tick)
		if c.cfg.OnUpdate != nil {
			if c.cur.Load() == l {
				c.cfg.OnUpdate(u)
			}
			continue
		}
		select {
		case c.updates <- u:
		case <-c.done:
			return
		default:
		}
	}
}

// settle delivers the verdict r on a pending command, once: a verdict is
// final, the command is no longer resent. A verdict on a command not
// pending (already settled: an acknowledgement repeated in a later state
// update or also sent on the stream; or never sent with Send) is dropped.
// It reports whether r settled a command.
func (c *Client) settle(r wire.CommandResult) bool {
	c.pmu.Lock()
	_, ok := c.pending[r.Seq]
	delete(c.pending, r.Seq)
	c.pmu.Unlock()
	if !ok {
		return false
	}
	if c.cfg.OnResult != nil {
		c.cfg.OnResult(r)
		return true
	}
	select {
	case c.results <- r:
	default: // nobody reads results: drop
	}
	return true
}

// AckedInState returns how many commands were settled by an
// acknowledgement inside a state update (the others by a CommandResult on
// the stream).
func (c *Client) AckedInState() uint64 { return c.ackedInState.Load() }

// Stats returns the bytes this session sent and received on the wire
// (QUIC packets, headers and encryption included), over all its
// connections.
func (c *Client) Stats() (sent, received uint64) {
	sent, received = c.pastSent.Load(), c.pastReceived.Load()
	if l := c.cur.Load(); l != nil {
		s := l.conn.QUIC().ConnectionStats()
		sent, received = sent+s.BytesSent, received+s.BytesReceived
	}
	return sent, received
}

// PacketStats returns the QUIC packets this session sent and received,
// over all its connections (a server's packets per player are what its
// clients received).
func (c *Client) PacketStats() (sent, received uint64) {
	sent, received = c.pastPktSent.Load(), c.pastPktRecv.Load()
	if l := c.cur.Load(); l != nil {
		s := l.conn.QUIC().ConnectionStats()
		sent, received = sent+s.PacketsSent, received+s.PacketsReceived
	}
	return sent, received
}

// StreamUpdates returns how many state updates came on the stream rather
// than as datagrams (those too large for one).
func (c *Client) StreamUpdates() uint64 { return c.streamUpdates.Load() }

// Reconnects returns how many times the session resumed on a new
// connection.
func (c *Client) Reconnects() uint64 { return c.reconnects.Load() }

// Resent returns how many commands were sent again after a reconnection
// (a command may count once per reconnection).
func (c *Client) Resent() uint64 { return c.resent.Load() }

// Pending returns how many commands await the server's verdict.
func (c *Client) Pending() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return len(c.pending)
}
