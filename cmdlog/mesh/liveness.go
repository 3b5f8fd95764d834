package mesh

// Crash detection. A node holds one TLS-over-TCP connection to each
// sequencing replica among its peers, on the TCP port of the same number as the peer's QUIC (UDP)
// address, and neither end ever writes on it. When a peer's process ends
// for any reason (SIGKILL, a crash, an exit), its kernel closes the
// connection, and the mesh reports msg.PeerGone to its own node one round
// trip later. QUIC cannot tell: a killed peer sends no CONNECTION_CLOSE,
// and its silence looks like load until a timeout, which must be long on
// a busy machine to avoid false suspicions. The loss of a whole machine or
// of a network path still needs the cores' silence timeouts; this makes
// process crashes fast to see, and costs nothing while nothing fails.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

const (
	// livenessALPN keeps the liveness port from being mistaken for any
	// other TLS service (and the other way round).
	livenessALPN = "broadside-liveness/1"
	// maxLivenessConns bounds the connections a node accepts on its
	// liveness port; more are closed at once.
	maxLivenessConns = 256
	// livenessHandshake bounds a TLS handshake on the liveness port.
	livenessHandshake = 3 * time.Second
	// A peer that cannot be reached is redialled after livenessRedialMin,
	// doubling up to livenessRedialMax.
	livenessRedialMin = 20 * time.Millisecond
	livenessRedialMax = time.Second
)

// PeerGoneReports returns how many times a peer's liveness connection
// ended (each reported to the local node as msg.PeerGone).
func (m *Mesh) PeerGoneReports() uint64 { return m.goneReports.Load() }

// startLiveness listens on the TCP twin of the mesh's UDP address and
// starts watching every sequencing replica peer known so far. A port that cannot be
// bound is logged and left alone: peers then see this node's crashes only
// by their timeouts.
func (m *Mesh) startLiveness() {
	ln, err := net.Listen("tcp", m.ep.Addr().String())
	if err != nil {
		m.log.Warn("mesh: no crash detection for this node (its TCP liveness port cannot be bound); peers will notice its crashes by their silence timeouts",
			"self", m.cfg.Self, "addr", m.ep.Addr().String(), "err", err)
	} else {
		m.liveLn = ln
		m.wg.Add(1)
		go m.acceptLiveness(ln)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.peers {
		m.watchLocked(id)
	}
}

// watchLocked starts watching a sequencing replica peer, once (the only
// crashes the cores act on are those of view members).
func (m *Mesh) watchLocked(id msg.NodeID) {
	if !m.cfg.CrashDetect || id == m.cfg.Self || RoleOf(id) != RoleSeq || m.watching[id] || m.ctx.Err() != nil {
		return
	}
	m.watching[id] = true
	m.wg.Add(1)
	go m.watch(id)
}

// acceptLiveness holds the connections peers open to watch this node. They
// carry nothing: a byte read on one is a protocol error and closes it.
func (m *Mesh) acceptLiveness(ln net.Listener) {
	defer m.wg.Done()
	stop := context.AfterFunc(m.ctx, func() { ln.Close() })
	defer stop()
	slots := make(chan struct{}, maxLivenessConns)
	cfg := transport.WithALPN(m.cfg.ServerTLS, livenessALPN)
	for {
		c, err := ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer func() { <-slots }()
			tc := tls.Server(c, cfg)
			defer tc.Close()
			stop := context.AfterFunc(m.ctx, func() { tc.Close() })
			defer stop()
			ctx, cancel := context.WithTimeout(m.ctx, livenessHandshake)
			err := tc.HandshakeContext(ctx)
			cancel()
			if err != nil {
				return
			}
			// Only server nodes watch (a client's crash is nobody's
			// concern): anything else is closed after its handshake.
			if m.cfg.RequireIdentity {
				certs := tc.ConnectionState().PeerCertificates
				if len(certs) == 0 {
					return
				}
				if id, ok, err := IdentityOf(certs[0]); err != nil || !ok || id.Role == RoleClient {
					return
				}
			}
			var b [1]byte
			tc.Read(b[:])
		}()
	}
}

// watch keeps a liveness connection to peer open, and reports
// msg.PeerGone each time an established one is closed by the peer's side.
func (m *Mesh) watch(peer msg.NodeID) {
	defer m.wg.Done()
	wait := livenessRedialMin
	sleep := func() bool {
		t := time.NewTimer(wait)
		defer t.Stop()
		wait = min(2*wait, livenessRedialMax)
		select {
		case <-m.ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for m.ctx.Err() == nil {
		m.mu.Lock()
		addr := m.peers[peer]
		m.mu.Unlock()
		tc, err := m.dialLiveness(peer, addr)
		if err != nil {
			m.log.Debug("mesh: liveness dial failed", "self", m.cfg.Self, "peer", peer, "addr", addr, "err", err)
			if !sleep() {
				return
			}
			continue
		}
		wait = livenessRedialMin
		stop := context.AfterFunc(m.ctx, func() { tc.Close() })
		m.watchesUp.Add(1)
		var b [1]byte
		n, err := tc.Read(b[:])
		m.watchesUp.Add(-1)
		stop()
		tc.Close()
		if m.ctx.Err() != nil {
			return
		}
		if n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			m.goneReports.Add(1)
			m.log.Info("mesh: a peer's process ended (its liveness connection closed)", "self", m.cfg.Self, "peer", peer, "addr", addr)
			m.cfg.Inbox.Deliver(msg.Envelope{From: peer, To: m.cfg.Self, Msg: msg.PeerGone{}})
		} else {
			// A byte (the protocol has none) or another error: not a
			// verdict on the peer's process.
			m.log.Debug("mesh: liveness connection ended", "self", m.cfg.Self, "peer", peer, "n", n, "err", err)
			wait = livenessRedialMax
		}
		if !sleep() {
			return
		}
	}
}

// dialLiveness opens a liveness connection to peer at addr and checks that
// the certificate it presents is the peer's.
func (m *Mesh) dialLiveness(peer msg.NodeID, addr string) (*tls.Conn, error) {
	if addr == "" {
		return nil, errors.New("no address")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg := transport.WithALPN(m.cfg.ClientTLS, livenessALPN)
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(m.ctx, livenessHandshake)
	defer cancel()
	var d net.Dialer // TCP keepalives end a connection to a machine that vanished
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		return nil, err
	}
	if _, err := checkPeer(tc.ConnectionState(), peer, m.cfg.RequireIdentity); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}
