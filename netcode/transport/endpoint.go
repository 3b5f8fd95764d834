package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// ErrEndpointClosed is returned by Endpoint methods after Close. It matches
// net.ErrClosed too.
var ErrEndpointClosed = fmt.Errorf("transport: endpoint closed: %w", net.ErrClosed)

// Endpoint is one Broadside node's QUIC presence: a single UDP socket through
// which it both accepts connections (after Listen) and dials other nodes.
// Sharing the socket means peers see one stable address per node, and a
// node that serves while dialing costs one socket and one receive loop.
//
// All methods are safe for concurrent use. Close ends everything the
// endpoint started.
type Endpoint struct {
	cfg *settings
	udp *net.UDPConn
	tr  *quic.Transport

	mu       sync.Mutex
	listener *quic.Listener
	conns    map[*Conn]struct{} // open connections, each removed when it closes
	closed   bool

	connsDone sync.WaitGroup // one per tracked conn, done when its cleanup ran
	closeOnce sync.Once
	closeErr  error
}

// NewEndpoint validates cfg and binds the endpoint's UDP socket. It does not
// accept connections until Listen is called.
func NewEndpoint(cfg Config) (*Endpoint, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	laddr, err := net.ResolveUDPAddr("udp", s.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: resolve listen address %q: %w", s.ListenAddr, err)
	}
	udp, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("transport: bind %s: %w", s.ListenAddr, err)
	}
	tuneSocketBuffers(udp, s.logger)
	e := &Endpoint{
		cfg: s,
		udp: udp,
		tr: &quic.Transport{
			Conn:                udp,
			StatelessResetKey:   s.StatelessResetKey,
			ConnContext:         s.ConnContext,
			VerifySourceAddress: s.VerifySourceAddress,
		},
		conns: make(map[*Conn]struct{}),
	}
	return e, nil
}

// Addr returns the local address of the endpoint's socket, for serving and
// dialing alike.
func (e *Endpoint) Addr() net.Addr { return e.udp.LocalAddr() }

// Listen starts accepting incoming connections; fetch them with Accept. It
// needs Config.ServerTLS and may be called once.
func (e *Endpoint) Listen() error {
	if e.cfg.serverTLS == nil {
		return errors.New("transport: listen: Config.ServerTLS is not set")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrEndpointClosed
	}
	if e.listener != nil {
		return errors.New("transport: listen: already listening")
	}
	ln, err := e.tr.Listen(e.cfg.serverTLS, e.cfg.quic)
	if err != nil {
		return fmt.Errorf("transport: listen on %s: %w", e.Addr(), err)
	}
	e.listener = ln
	return nil
}

// Accept waits for the next incoming connection whose handshake completed.
// It returns ErrEndpointClosed after Close.
func (e *Endpoint) Accept(ctx context.Context) (*Conn, error) {
	e.mu.Lock()
	ln, closed := e.listener, e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrEndpointClosed
	}
	if ln == nil {
		return nil, errors.New("transport: accept: not listening (call Listen first)")
	}
	qc, err := ln.Accept(ctx)
	if err != nil {
		if errors.Is(err, quic.ErrServerClosed) {
			return nil, ErrEndpointClosed
		}
		return nil, fmt.Errorf("transport: accept: %w", err)
	}
	return e.track(qc)
}

// Dial opens a connection to addr ("host:port") from the endpoint's socket
// and waits for the handshake. The host also becomes the TLS server name
// unless Config.ClientTLS sets one. The context bounds resolution and
// handshake.
func (e *Endpoint) Dial(ctx context.Context, addr string) (*Conn, error) {
	if e.cfg.clientTLS == nil {
		return nil, fmt.Errorf("transport: dial %s: Config.ClientTLS is not set", addr)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrEndpointClosed
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	raddr, err := e.resolve(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	tlsConf := e.cfg.clientTLS
	if tlsConf.ServerName == "" {
		tlsConf = tlsConf.Clone()
		tlsConf.ServerName = host
	}
	qc, err := e.tr.Dial(ctx, raddr, tlsConf, e.cfg.quic)
	if err != nil {
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return nil, ErrEndpointClosed
		}
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return e.track(qc)
}

// resolve turns "host:port" into a UDP address of a family the local socket
// can reach (an IPv4-bound socket cannot send to ::1).
func (e *Endpoint) resolve(ctx context.Context, addr string) (*net.UDPAddr, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "udp", portStr)
	if err != nil {
		return nil, err
	}
	var candidates []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		candidates = []netip.Addr{ip}
	} else {
		candidates, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
	}
	local := e.udp.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
	for _, ip := range candidates {
		ip = ip.Unmap()
		switch {
		case local.Is4() || local.Is4In6():
			if !ip.Is4() {
				continue
			}
		case !local.IsUnspecified(): // a specific IPv6 address
			if !ip.Is6() {
				continue
			}
		}
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(port))), nil
	}
	return nil, fmt.Errorf("no address of %q reachable from local %s", host, local)
}

// track wraps an established connection and registers it for Close.
func (e *Endpoint) track(qc *quic.Conn) (*Conn, error) {
	dg := qc.ConnectionState().SupportsDatagrams
	// Sending needs the peer's advertisement (and, unless send-only, our
	// own); receiving needs ours.
	c := &Conn{qc: qc, maxFrame: e.cfg.MaxFrameSize, maxWrite: e.cfg.MaxWriteFrameSize,
		datagrams: dg.Remote && (dg.Local || e.cfg.SendOnlyDatagrams), recvDatagrams: dg.Local}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = qc.CloseWithError(quic.ApplicationErrorCode(CodeShuttingDown), "endpoint closing")
		return nil, ErrEndpointClosed
	}
	e.conns[c] = struct{}{}
	e.connsDone.Add(1)
	context.AfterFunc(qc.Context(), func() {
		defer e.connsDone.Done()
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
	})
	e.mu.Unlock()
	return c, nil
}

// Close shuts the endpoint down: it stops accepting, closes every open
// connection with CodeShuttingDown (so peers learn at once rather than by
// idle timeout), stops the QUIC transport and closes the socket. It returns
// when all of the endpoint's goroutines have ended; later calls return the
// first call's result.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.close() })
	return e.closeErr
}

func (e *Endpoint) close() error {
	e.mu.Lock()
	e.closed = true
	ln := e.listener
	e.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	closeConn := func(qc *quic.Conn) {
		wg.Go(func() { _ = qc.CloseWithError(quic.ApplicationErrorCode(CodeShuttingDown), "endpoint closing") })
	}
	if ln != nil {
		if err := ln.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close listener: %w", err))
		}
		// Connections that finished their handshake but were never accepted
		// deserve a proper close too. After Close the queue only drains.
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				break
			}
			closeConn(qc)
		}
	}
	// No connection is tracked after closed was set, so the set is final.
	e.mu.Lock()
	for c := range e.conns {
		closeConn(c.qc)
	}
	e.mu.Unlock()
	wg.Wait()

	if err := e.tr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close QUIC transport: %w", err))
	}
	if err := e.udp.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close socket: %w", err))
	}
	// Every connection is gone now, so every cleanup has run or is running.
	e.connsDone.Wait()
	if err := errors.Join(errs...); err != nil {
		e.cfg.logger.Warn("transport: endpoint close", "addr", e.Addr(), "err", err)
		return fmt.Errorf("transport: close endpoint %s: %w", e.Addr(), err)
	}
	return nil
}

// Conn is an established QUIC connection of an Endpoint. It carries framed
// long-lived streams and, when both peers enabled them, datagrams. Methods
// are safe for concurrent use.
type Conn struct {
	qc            *quic.Conn
	maxFrame      int
	maxWrite      int
	datagrams     bool // SendDatagram works: the peer accepts datagrams (and we enabled them)
	recvDatagrams bool // ReceiveDatagram works: we advertised datagram support
	// roomLimit is the payload size limit quic-go reported when it last
	// refused a datagram, less the ACK's room; it holds until roomUntil
	// (UnixNano). See DatagramRoom.
	roomLimit, roomUntil atomic.Int64
}

// OpenStream opens a new bidirectional framed stream, waiting while the
// peer's stream limit is reached. The peer's AcceptStream sees it only when
// the first bytes arrive, so send a frame (and flush) before expecting the
// peer to answer. Open a few long-lived streams, not one per request.
func (c *Conn) OpenStream(ctx context.Context) (*Stream, error) {
	qs, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("transport: open stream to %s: %w", c.RemoteAddr(), err)
	}
	return newStream(qs, c), nil
}

// AcceptStream waits for the next stream the peer opened.
func (c *Conn) AcceptStream(ctx context.Context) (*Stream, error) {
	qs, err := c.qc.AcceptStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("transport: accept stream from %s: %w", c.RemoteAddr(), err)
	}
	return newStream(qs, c), nil
}

// CloseWithCode closes the connection, telling the peer code and a short
// human-readable reason. It returns once the connection has shut down.
// Closing an already closed connection does nothing.
func (c *Conn) CloseWithCode(code ErrorCode, reason string) error {
	return c.qc.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

// Close closes the connection with CodeNormal.
func (c *Conn) Close() error { return c.CloseWithCode(CodeNormal, "") }

// Context is cancelled when the connection closes; context.Cause of it is the
// close error, from which ErrorCodeOf extracts the application code.
func (c *Conn) Context() context.Context { return c.qc.Context() }

// LocalAddr returns the local address (the endpoint's socket).
func (c *Conn) LocalAddr() net.Addr { return c.qc.LocalAddr() }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }

// TLS returns the TLS state of the handshake: the negotiated ALPN protocol
// and, with mutual TLS, the verified peer certificates (the peer's identity).
func (c *Conn) TLS() tls.ConnectionState { return c.qc.ConnectionState().TLS }

// QUIC returns the underlying quic-go connection, for what this package does
// not wrap (statistics, unidirectional streams).
func (c *Conn) QUIC() *quic.Conn { return c.qc }
