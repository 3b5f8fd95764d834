// Package mesh carries cmdlog protocol messages between nodes over QUIC.
// Each node owns one Endpoint (one UDP socket, serving and dialing). A link
// to a peer is one long-lived bidirectional stream: the dialer's first
// frame names its node id, every later frame is one message encoded with
// cmdlog/codec. A message to an idle link is written by its sender, without
// waiting (see sendOn); messages sent while a write is in progress, or that
// QUIC cannot take at once, are queued and written by the link's own
// goroutine, which coalesces everything queued into one flush. Links are
// dialed on demand (peers with known addresses) or learned from incoming
// connections (clients, which have no fixed address).
//
// Delivery is best effort, like the network it models: when a peer is down
// or its queue is full, messages are dropped and the protocol retries.
//
// A peer proves its node id with its certificate (Identity). A client may
// only append, check the tail, read and, with broadside:perm:trim, trim: a
// client link that sends anything else (the messages nodes exchange:
// StartView, Store, Seal, ...) is closed with transport.CodeUnauthorized
// before the node sees it.
package mesh

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/quic-go/quic-go"
	"golang.org/x/time/rate"
)

// ALPN is the application protocol of cmdlog links.
const ALPN = "broadside-log/1"

// CodeBadMessage closes a link whose peer sent an undecodable message.
const CodeBadMessage = transport.CodeFirstProtocolSpecific + 1

// maxQueued bounds messages queued for one peer, and maxQueuedBytes
// their size (SizeOf): a peer that reads slowly costs at most that much.
const (
	maxQueued      = 1 << 16
	maxQueuedBytes = 64 << 20
)

// MaxFrameSize is the largest message a link carries, either way: the
// cores cap their messages at about 4 MiB of records (a Store batch, a
// read response, a client's Append), so 8 MiB leaves room for their
// overhead while a hostile peer's frame costs at most that much to
// receive. A larger frame closes the link (transport.CodeFrameTooLarge);
// a larger message to send is dropped.
const MaxFrameSize = 8 << 20

// sharedDecodeAbove is the frame size from which received frames keep
// their own buffer and are decoded without copying their records.
const sharedDecodeAbove = 4 << 10

// linkIdleTimeout closes a connection that received nothing, keep-alives
// included, for this long. A peer killed without closing its connections
// (SIGKILL) is only noticed this way when it does not come back on its own
// (server nodes announce themselves when they restart; clients have no
// address to be dialled at), and until then whatever is sent to it is
// lost: a client's appends to a restarted replica stalled for the 30 s of
// quic-go's default. Keep-alives every linkIdleTimeout/5 keep a quiet live
// link open.
const linkIdleTimeout = 1500 * time.Millisecond

// maxPending bounds messages held for a peer while its link is dialled,
// and maxPendingBytes their size.
const (
	maxPending      = 4096
	maxPendingBytes = 8 << 20
)

// SizeOf estimates the encoded size of m, for the byte budgets of the
// queues: the records' data and a fixed cost per item (node.MessageSize).
func SizeOf(m msg.Message) int { return node.MessageSize(m) }

// Config configures a Mesh.
type Config struct {
	// Self is the local node's id.
	Self msg.NodeID
	// ListenAddr is the UDP address to bind ("127.0.0.1:0" for an
	// ephemeral port). Clients bind too: replies come back over the
	// connections they dial.
	ListenAddr string
	// Peers maps node ids to addresses for dialing. Ids not listed are
	// reachable only after they connect to us.
	Peers map[msg.NodeID]string
	// ServerTLS and ClientTLS secure the links (see transport.DevCA).
	ServerTLS, ClientTLS *tls.Config
	// Inbox receives the messages addressed to Self.
	Inbox  node.Inbox
	Logger *slog.Logger
	// StatelessResetKey, if set and the same across restarts of this
	// node (LoadOrCreateResetKey), lets the node answer packets of its
	// previous life's connections with a QUIC stateless reset: a peer
	// that cannot be told otherwise (a client, which has no address to be
	// dialled at) learns at once that its connection is dead, instead of
	// at the idle timeout.
	StatelessResetKey *quic.StatelessResetKey
	// RequireIdentity refuses peers whose certificates carry no node
	// identity (see Identity); logd sets it. Whatever it says, a peer whose
	// certificate carries an identity may only use the node id it proves:
	// a link claiming another is closed with CodeBadIdentity, on the
	// accepting side (the dialer's hello) and the dialling side (the
	// server's certificate).
	RequireIdentity bool
	// CrashDetect makes a server node watch the processes of the
	// sequencing replicas among its peers over TCP (see liveness.go) and
	// deliver msg.PeerGone to Inbox when one ends, and be watched: it
	// listens on TCP at its UDP address's port.
	CrashDetect bool
}

// Mesh is one node's set of links.
type Mesh struct {
	cfg    Config
	ep     *transport.Endpoint
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[msg.NodeID]string
	links map[msg.NodeID]*link
	// retired are links replaced by a newer one to the same peer, still
	// read until their connection ends.
	retired []*link
	dialing map[msg.NodeID]time.Time
	// pending holds messages for peers being dialled.
	pending      map[msg.NodeID][]msg.Message
	pendingBytes map[msg.NodeID]int

	dropped uint64
	// identityRejects counts links closed with CodeBadIdentity,
	// forbidden those closed for a message their peer's role or
	// certificate does not allow (transport.CodeUnauthorized).
	identityRejects atomic.Uint64
	forbidden       atomic.Uint64
	warnLimit       *rate.Limiter

	// Crash detection (liveness.go).
	liveLn      net.Listener
	watching    map[msg.NodeID]bool
	goneReports atomic.Uint64
	watchesUp   atomic.Int32 // liveness connections established
}

type link struct {
	peer msg.NodeID
	// ident is what the peer's certificate lets it do (see checkPeer).
	ident Identity
	st    *transport.Stream
	mu    sync.Mutex
	queue []msg.Message
	// queueBytes is the SizeOf sum of queue.
	queueBytes int
	// writing: a goroutine owns writing to st, either a sender writing
	// inline (Send on an idle link) or the writer goroutine (woken by
	// wake). The owner writes until queue is empty, then clears it.
	writing bool
	wake    chan struct{}
	closed  chan struct{}
	once    sync.Once
}

// New opens the node's endpoint and starts accepting links.
func New(cfg Config) (*Mesh, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	ep, err := transport.NewEndpoint(transport.Config{
		ListenAddr: cfg.ListenAddr, ServerTLS: cfg.ServerTLS, ClientTLS: cfg.ClientTLS,
		ALPN: []string{ALPN}, MaxFrameSize: MaxFrameSize, IdleTimeout: linkIdleTimeout,
		KeepAlivePeriod: linkIdleTimeout / 5, Logger: cfg.Logger, StatelessResetKey: cfg.StatelessResetKey,
	})
	if err != nil {
		return nil, fmt.Errorf("mesh %d: %w", cfg.Self, err)
	}
	if cfg.ServerTLS != nil {
		if err := ep.Listen(); err != nil {
			ep.Close()
			return nil, fmt.Errorf("mesh %d: listen: %w", cfg.Self, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mesh{cfg: cfg, ep: ep, log: cfg.Logger, ctx: ctx, cancel: cancel,
		peers: make(map[msg.NodeID]string), links: make(map[msg.NodeID]*link), dialing: make(map[msg.NodeID]time.Time),
		pending: make(map[msg.NodeID][]msg.Message), pendingBytes: make(map[msg.NodeID]int), warnLimit: rate.NewLimiter(1, 5),
		watching: make(map[msg.NodeID]bool)}
	for id, a := range cfg.Peers {
		m.peers[id] = a
	}
	if cfg.ServerTLS != nil {
		m.wg.Add(1)
		go m.acceptLoop()
		// A server node announces itself to every peer it knows: a peer
		// that still holds a connection to this node's previous life
		// (killed without closing it) would otherwise keep writing into
		// it until the idle timeout, 30 s, as nothing else tells it that
		// the connection is dead. Accepting our dial replaces its link.
		for id := range cfg.Peers {
			if id != cfg.Self && id < ClientIDBase {
				m.wg.Add(1)
				go m.announce(id)
			}
		}
		if cfg.CrashDetect {
			m.startLiveness()
		}
	}
	return m, nil
}

// announce dials peer until a link to it exists (ours or its own),
// retrying for a while when it is down (it dials us when it comes back).
func (m *Mesh) announce(peer msg.NodeID) {
	defer m.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for range 20 {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		_, linked := m.links[peer]
		if !linked {
			m.dialLocked(peer)
		}
		m.mu.Unlock()
		if linked {
			return
		}
		t.Reset(250 * time.Millisecond)
	}
}

// IdentityRejects returns how many links were closed because their
// claimed node id was not the certificate's.
func (m *Mesh) IdentityRejects() uint64 { return m.identityRejects.Load() }

// Forbidden returns how many client links were closed because they sent a
// message a client may not (a server-to-server message, or a Trim without
// the certificate's broadside:perm:trim).
func (m *Mesh) Forbidden() uint64 { return m.forbidden.Load() }

// Addr returns the local UDP address.
func (m *Mesh) Addr() string { return m.ep.Addr().String() }

// SetPeer adds or changes a peer's address.
func (m *Mesh) SetPeer(id msg.NodeID, addr string) {
	m.mu.Lock()
	m.peers[id] = addr
	m.watchLocked(id)
	m.mu.Unlock()
}

// Dropped returns the number of messages dropped so far.
func (m *Mesh) Dropped() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// Close closes every link and the endpoint, and waits for the goroutines.
func (m *Mesh) Close() error {
	m.cancel()
	err := m.ep.Close()
	m.mu.Lock()
	for _, l := range m.links {
		l.close()
	}
	for _, l := range m.retired {
		l.close()
	}
	m.mu.Unlock()
	m.wg.Wait()
	return err
}

// Send queues env.Msg for env.To. It never blocks on the network.
func (m *Mesh) Send(env msg.Envelope) {
	if env.To == m.cfg.Self {
		m.cfg.Inbox.Deliver(env)
		return
	}
	m.mu.Lock()
	l := m.links[env.To]
	if l == nil {
		// Hold the message for the link being dialled (a new client's
		// first read would otherwise wait for a retry timeout).
		size := SizeOf(env.Msg)
		if _, known := m.peers[env.To]; known && len(m.pending[env.To]) < maxPending && m.pendingBytes[env.To]+size <= maxPendingBytes {
			m.pending[env.To] = append(m.pending[env.To], env.Msg)
			m.pendingBytes[env.To] += size
		} else {
			m.dropped++
		}
		m.dialLocked(env.To)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if !m.sendOn(l, env.Msg) {
		m.mu.Lock()
		m.dropped++
		m.mu.Unlock()
	}
}

// inlineMax is the largest message (SizeOf) a sender writes itself on an
// idle link; larger ones always go through the link's writer goroutine.
const inlineMax = 64 << 10

// sendOn writes mm on l. On an idle link (nothing queued, no write in
// progress) the sender encodes and writes it itself, without waiting:
// QUIC takes the frame at once if the peer's flow-control window has room
// for it (TryWriteAll), so an idle link adds no goroutine hand-off, as the
// baselines' pipe does. Otherwise, and when QUIC would block, mm is queued
// for the writer goroutine, which coalesces everything queued into one
// flush; Send never blocks on the network. It reports false if mm was
// dropped.
func (m *Mesh) sendOn(l *link, mm msg.Message) bool {
	size := SizeOf(mm)
	l.mu.Lock()
	if l.writing || len(l.queue) > 0 || size > inlineMax {
		if len(l.queue) >= maxQueued || l.queueBytes+size > maxQueuedBytes {
			l.mu.Unlock()
			return false
		}
		l.queue = append(l.queue, mm)
		l.queueBytes += size
		kick := !l.writing
		l.writing = true
		l.mu.Unlock()
		if kick {
			l.kick()
		}
		return true
	}
	l.writing = true
	l.mu.Unlock()

	// The frame (length and encoding) is built in the encoder's buffer
	// and copied once, by QUIC.
	err := codec.EncodeFramed(mm, func(frame []byte) error {
		if err := checkFrame(frame[codec.FrameHeader:]); err != nil {
			return err
		}
		return l.st.QUIC().TryWriteAll(frame)
	})
	l.mu.Lock()
	switch {
	case errors.Is(err, quic.ErrWouldBlock):
		// The writer goroutine writes it first, waiting for credit.
		l.queue = slices.Insert(l.queue, 0, mm)
		l.queueBytes += size
		err = nil
	case err != nil:
		l.writing = false
		l.mu.Unlock()
		if errors.Is(err, codec.ErrTooLarge) {
			m.log.Error("mesh: dropping a message over the codec's limits", "self", m.cfg.Self, "peer", l.peer, "err", err)
		} else {
			m.removeLink(l) // the stream failed; the writer would stop too
		}
		return false
	}
	if len(l.queue) == 0 {
		l.writing = false
		l.mu.Unlock()
		return true
	}
	// Others queued meanwhile (or this one would block): the writer
	// goroutine takes over, writing stays set.
	l.mu.Unlock()
	l.kick()
	return true
}

// checkFrame refuses an encoded message the peer would refuse (and close
// the link for): over MaxFrameSize.
func checkFrame(b []byte) error {
	if len(b) > MaxFrameSize {
		return fmt.Errorf("mesh: a message of %d bytes, over MaxFrameSize: %w", len(b), codec.ErrTooLarge)
	}
	return nil
}

func (l *link) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.closed)
		l.st.Close()
	})
}

// dialLocked starts a dial to id unless one is in progress or recent.
func (m *Mesh) dialLocked(id msg.NodeID) {
	addr, ok := m.peers[id]
	if !ok || m.ctx.Err() != nil {
		m.dropped += uint64(len(m.pending[id]))
		delete(m.pending, id)
		delete(m.pendingBytes, id)
		return
	}
	if t, busy := m.dialing[id]; busy && time.Since(t) < 200*time.Millisecond {
		return
	}
	m.dialing[id] = time.Now()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
		defer cancel()
		conn, err := m.ep.Dial(ctx, addr)
		if err == nil {
			if _, ierr := checkPeer(conn.TLS(), id, m.cfg.RequireIdentity); ierr != nil {
				m.log.Warn("mesh: closing a link to a peer whose certificate is not its", "self", m.cfg.Self, "peer", id, "addr", addr, "err", ierr)
				conn.CloseWithCode(CodeBadIdentity, "bad identity")
				err = ierr
			}
		}
		if err != nil {
			m.log.Debug("mesh dial failed", "self", m.cfg.Self, "peer", id, "addr", addr, "err", err)
			m.mu.Lock()
			if m.links[id] == nil {
				m.dropped += uint64(len(m.pending[id]))
				delete(m.pending, id)
				delete(m.pendingBytes, id)
			}
			m.mu.Unlock()
			return
		}
		st, err := conn.OpenStream(ctx)
		if err != nil {
			conn.CloseWithCode(transport.CodeInternalError, "open stream")
			return
		}
		var hello [4]byte
		binary.BigEndian.PutUint32(hello[:], uint32(m.cfg.Self))
		if err := st.WriteFrame(hello[:]); err != nil {
			conn.CloseWithCode(transport.CodeInternalError, "hello")
			return
		}
		// A link we dialled is to a server node (clients are never
		// dialled): the cores check what it sends.
		m.addLink(id, Identity{ID: id, Role: RoleOf(id)}, st)
	}()
}

func (m *Mesh) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ep.Accept(m.ctx)
		if err != nil {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
			st, err := conn.AcceptStream(ctx)
			cancel()
			if err != nil {
				conn.CloseWithCode(transport.CodeProtocolError, "no stream")
				return
			}
			st.SetReadDeadline(time.Now().Add(5 * time.Second))
			hello, err := st.ReadFrame(nil)
			st.SetReadDeadline(time.Time{})
			if err != nil || len(hello) != 4 {
				conn.CloseWithCode(transport.CodeProtocolError, "bad hello")
				return
			}
			peer := msg.NodeID(binary.BigEndian.Uint32(hello))
			if peer == msg.Coordinator || peer == m.cfg.Self {
				conn.CloseWithCode(transport.CodeProtocolError, "bad node id")
				return
			}
			ident, err := checkPeer(conn.TLS(), peer, m.cfg.RequireIdentity)
			if err != nil {
				m.identityRejects.Add(1)
				if m.warnLimit.Allow() {
					m.log.Warn("mesh: closing a link whose claimed node id its certificate does not prove", "self", m.cfg.Self,
						"claimed", peer, "remote", conn.RemoteAddr(), "err", err, "rejected_so_far", m.identityRejects.Load())
				}
				conn.CloseWithCode(CodeBadIdentity, "bad identity")
				return
			}
			m.addLink(peer, ident, st)
		}()
	}
}

// addLink installs a link (replacing an older one to the same peer for
// sending) and starts its reader and writer. The older link is not closed:
// it may be the one the peer sends on (both ends dialled at once), and it
// ends by itself when its connection does (a dead peer's at the idle
// timeout).
func (m *Mesh) addLink(peer msg.NodeID, ident Identity, st *transport.Stream) {
	l := &link{peer: peer, ident: ident, st: st, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	m.mu.Lock()
	if m.ctx.Err() != nil {
		m.mu.Unlock()
		st.Close()
		return
	}
	if old := m.links[peer]; old != nil {
		m.retired = append(m.retired, old)
	}
	m.links[peer] = l
	delete(m.dialing, peer)
	if p := m.pending[peer]; len(p) > 0 {
		l.queue = append(l.queue, p...)
		l.queueBytes = m.pendingBytes[peer]
		l.writing = true
		l.wake <- struct{}{}
	}
	delete(m.pending, peer)
	delete(m.pendingBytes, peer)
	m.mu.Unlock()
	// Tell the local node: what it sent on the previous link may be lost.
	m.cfg.Inbox.Deliver(msg.Envelope{From: peer, To: m.cfg.Self, Msg: msg.LinkUp{}})
	m.wg.Add(2)
	go m.readLoop(l)
	go m.writeLoop(l)
}

func (m *Mesh) removeLink(l *link) {
	l.close()
	m.mu.Lock()
	if m.links[l.peer] == l {
		delete(m.links, l.peer)
	}
	if i := slices.Index(m.retired, l); i >= 0 {
		m.retired = slices.Delete(m.retired, i, i+1)
	}
	m.mu.Unlock()
}

func (m *Mesh) readLoop(l *link) {
	defer m.wg.Done()
	defer m.removeLink(l)
	// Frames that fit buf are read into it and decoded with a copy of
	// their few record bytes; larger ones (batches of records) get a
	// buffer of their own, which the decoded message keeps: their records
	// are not copied again.
	buf := make([]byte, 0, sharedDecodeAbove)
	for {
		frame, err := l.st.ReadFrame(buf[:0])
		if err != nil {
			if errors.Is(err, transport.ErrFrameTooLarge) {
				l.st.Conn().CloseWithCode(transport.CodeFrameTooLarge, "frame too large")
			}
			return
		}
		decode := codec.Decode
		if cap(frame) > cap(buf) {
			decode = codec.DecodeShared
		}
		mm, err := decode(frame)
		if err != nil {
			m.log.Warn("mesh: closing link after malformed message", "self", m.cfg.Self, "peer", l.peer, "err", err)
			l.st.Conn().CloseWithCode(CodeBadMessage, "malformed message")
			return
		}
		if l.ident.Role == RoleClient {
			if err := clientMessage(l.ident, mm); err != nil {
				m.forbidden.Add(1)
				if m.warnLimit.Allow() {
					m.log.Warn("mesh: closing a client link that sent what a client may not", "self", m.cfg.Self, "peer", l.peer,
						"remote", l.st.Conn().RemoteAddr(), "err", err, "refused_so_far", m.forbidden.Load())
				}
				l.st.Conn().CloseWithCode(transport.CodeUnauthorized, "not permitted")
				return
			}
		}
		m.cfg.Inbox.DeliverInline(msg.Envelope{From: l.peer, To: m.cfg.Self, Msg: mm})
	}
}

func (m *Mesh) writeLoop(l *link) {
	defer m.wg.Done()
	defer m.removeLink(l)
	var batch []msg.Message
	bufferFrame := func(b []byte) error {
		if err := checkFrame(b); err != nil {
			return err
		}
		return l.st.BufferFrame(b)
	}
	for {
		select {
		case <-l.closed:
			return
		case <-m.ctx.Done():
			return
		case <-l.wake:
		}
		// The writer owns writing (l.writing) until the queue is empty.
		for {
			l.mu.Lock()
			if len(l.queue) == 0 {
				l.writing = false
				l.mu.Unlock()
				break
			}
			batch, l.queue = l.queue, batch[:0]
			l.queueBytes = 0
			l.mu.Unlock()
			for i, mm := range batch {
				batch[i] = nil
				if err := codec.EncodeTo(mm, bufferFrame); err != nil {
					if errors.Is(err, codec.ErrTooLarge) {
						// The peer would refuse it and close the link: drop
						// it (a bug of the sender; the protocol retries).
						m.log.Error("mesh: dropping a message over the codec's limits", "self", m.cfg.Self, "peer", l.peer, "err", err)
						m.mu.Lock()
						m.dropped++
						m.mu.Unlock()
						continue
					}
					return
				}
			}
			if err := l.st.Flush(); err != nil {
				return
			}
		}
	}
}
