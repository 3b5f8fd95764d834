package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// MaxPlayerFrame is the frame size limit on player streams: commands are
// tens of bytes, a Hello holds a token.
const MaxPlayerFrame = 2048

// Appender is where accepted commands go: the command log
// (*cmdlog.Client, cmdlog's remote client, replay.MemLog). AppendWithID
// returns when the record is stored as the log promises (Config.Durability)
// and stores a record whose id it already holds once: the server appends
// each command with CommandID, so resent commands count once.
type Appender interface {
	AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error
}

// AsyncAppender is an Appender that appends without a goroutine waiting
// (*cmdlog.Client and cmdlog's remote client): the server hands it each
// accepted command at once and is called back, so the commands in flight
// are bounded by the players' windows and the log client's rounds (in
// bytes), not by a number of append workers. done must be called once,
// quickly (it queues an acknowledgement), unless the call returns an
// error.
type AsyncAppender interface {
	Appender
	AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error
}

// Durability is what the log promises when an append returns; the server
// cannot tell, it is told (the embedded log's and logd's mode). Command
// acknowledgements say it: wire.AckReplicated or wire.AckDurable.
type Durability uint8

const (
	// Replicated (the zero value): in memory on every sequencing replica
	// (cmdlog seq.Memory). A server not told otherwise claims no more.
	Replicated Durability = iota
	// Durable: fsynced on every sequencing replica (cmdlog seq.Fsync).
	Durable
)

// DurabilityOf is what a server's acknowledgements promise over a log
// whose sequencing replicas run in durability d: Durable only when every
// replica fsyncs before acknowledging.
func DurabilityOf(d seq.Durability) Durability {
	if d == seq.Fsync {
		return Durable
	}
	return Replicated
}

// AckStatus returns the status of an acknowledgement under d.
func (d Durability) AckStatus() wire.AckStatus {
	if d == Durable {
		return wire.AckDurable
	}
	return wire.AckReplicated
}

// String returns "durable" or "replicated".
func (d Durability) String() string { return d.AckStatus().String() }

// Config configures a Server.
type Config struct {
	// ListenAddr is the UDP address for players (default 127.0.0.1:4433).
	ListenAddr string
	// TLS is the server's certificate (transport.DevCA for development).
	TLS *tls.Config
	// Secret verifies player tokens (HMAC-SHA256).
	Secret []byte
	// Log receives accepted commands, wrapped in envelopes, each with its
	// CommandID.
	Log Appender
	// Durability is what Log promises (default Replicated): the status
	// of every command acknowledgement.
	Durability Durability
	// Limits bound each player's commands.
	Limits IntakeLimits
	// TickRate and Tick tell clients the world's clock in Welcome, and
	// World describes the world (game-defined; e.g. its configuration,
	// so that a spectator can draw the map).
	TickRate uint16
	Tick     func() uint64
	World    []byte
	// MaxInflight caps a player's commands accepted and not yet
	// acknowledged (default 64): its window. A player at its window is
	// not read until an acknowledgement frees a slot (QUIC flow control
	// pushes back on it); below it, its stream is read as frames arrive,
	// so rate limits and the ack delay histogram see arrival times and
	// state acknowledgements are never stuck behind commands.
	MaxInflight int
	// MaxAppending is the number of append workers (default 512): the cap
	// on commands of all players inside an append at once. Accepted
	// commands wait for a worker in one FIFO, bounded by the players'
	// windows; when the log cannot keep up, acknowledgements slow down
	// and the players' windows fill (latency stays bounded), and the
	// world's tick markers, which share the log, keep getting through.
	MaxAppending int
	// State, if set, encodes the world's state for each client; Publish
	// then sends every session the state of a tick (see Publish).
	State StateSource
	// SpectatorDelay is how many ticks behind the players spectators see
	// the world (default 0).
	SpectatorDelay uint64
	// MaxDeltaTicks is the oldest acknowledged tick a delta may be based
	// on (default 15); a client further behind gets a full state.
	MaxDeltaTicks uint64
	// AckHold is how long a command's acknowledgement may wait for the
	// session's next state update, so that both go out in one packet
	// (default 0: acknowledgements are written as soon as the log stored
	// their commands). Acknowledgements wait only when the next update
	// is due within AckHold (the previous one plus a tick period, see
	// TickRate); the others go at once. A tick period (33 ms at 30 Hz)
	// puts every acknowledgement with a state update, adding half a tick
	// on average to the acknowledgement latency; the server then sends
	// one packet per player and tick instead of two. A shorter hold
	// bounds the added latency and puts the share hold/period of them
	// with an update.
	//
	// To a client that reads them there (Hello.AcksInState: the client
	// library's default) held acknowledgements go inside the state
	// datagram itself (StateUpdate.Acked), repeated in each later one until
	// the client's StateAck of a tick that carried them (a lost datagram
	// is repaired by the next; each command's window slot is held until
	// then, or until ackRepairTicks pass, when it goes on the stream too).
	// They then wait while updates keep coming (one at least in every two
	// holds: a tick late under load is common), at most 2 × AckHold. This
	// needs AcksInState.
	AckHold time.Duration
	// AcksInState lets held acknowledgements ride inside state datagrams
	// (above) for clients that read them there (default false: they go on
	// the stream, written right after the datagram so that QUIC packs both
	// into one packet). Off by default because it saves no packet with
	// quic-go v0.65: a packet of DATAGRAM frames only carries an ACK of the
	// client's packets that is already due, so the QUIC ACK of the
	// client's command, which rode in the stream acknowledgement's packet,
	// goes alone after the 25 ms ACK delay instead (docs/benchmarks.md,
	// session 12).
	AcksInState bool
	// MaxSpectators bounds spectator sessions (default 16; at most 2 per
	// token): each gets the whole world every tick.
	MaxSpectators int
	// HandshakeTimeout bounds the time from a connection's first packet
	// to its Hello (default 2s): the QUIC handshake, then the Hello frame.
	HandshakeTimeout time.Duration
	// Admission caps the connections held, before and after Hello.
	Admission AdmissionLimits
	// WarnRate bounds the warnings logged for closed connections per
	// second (default 5, a burst of 20); the others are counted, and the
	// next warning logged says how many were suppressed.
	WarnRate rate.Limit
	// Storing, if set, tells whether the log can store now; while it
	// returns an error (a full or failing disk under the log), commands
	// are refused busy (wire.AckBusy) without being appended, so that
	// players learn at once instead of waiting on an append that cannot
	// finish, and their connections stay open. Commands appended before
	// are acknowledged only if and when their append succeeds.
	Storing func() error
	// Now is the clock for token expiry and rate limits (default time.Now).
	Now      func() time.Time
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Server accepts player connections, authenticates them, and appends their
// commands to the log, acknowledging each when stored (with the log's
// Durability). A misbehaving
// player's connection is closed with an application error code; others are
// unaffected.
type Server struct {
	cfg      Config
	ep       *transport.Endpoint
	log      *slog.Logger
	metrics  serverMetrics
	wg       sync.WaitGroup
	draining atomic.Bool
	inflight atomic.Int64 // accepted commands not yet durable (or failed)
	mu       sync.Mutex
	players  map[uint32]*session
	watchers map[*session]struct{} // spectators
	applied  map[uint32]uint64     // last client sequence applied, per player
	sessions map[uint32]uint64     // session id of each player's latest connection
	// tokens holds the newest token accepted for each player (until
	// MaxTokenLifetime after its issue: older tokens are expired by then).
	tokens    map[uint32]tokenUse
	nextSweep int
	admit     *admission
	// warnings rate-limits the warnings of closed connections; suppressed
	// counts those not logged since the last one.
	warnings   *rate.Limiter
	suppressed atomic.Int64
	// Publish's scratch, reused from tick to tick (Publish runs on one
	// goroutine): the state payload, the session frame around it (a
	// datagram's bytes are copied by QUIC when sent), the targets.
	state   []byte
	frame   []byte
	targets []target
	// queue holds accepted commands for the MaxAppending append workers;
	// jobs pools the asyncJobs of an AsyncAppender's appends.
	queue *appendQueue
	jobs  sync.Pool
	// published is when Publish last ran (UnixNano; 0: never): with the
	// tick period, when the next state update is due (updateDueWithin).
	published atomic.Int64
}

// updateDueWithin tells whether the next state update is expected within
// d: Publish ran less than a tick period (TickRate) ago and its next run
// is at most d away, or a run is due now (overdue, or none yet: the
// world is starting or stalled; a hold then waits at most d anyway).
// A session's writer holds acknowledgements for the update only then
// (Config.AckHold): one that would wait the whole hold and go out alone
// anyway goes at once instead.
func (s *Server) updateDueWithin(d time.Duration) bool {
	last := s.published.Load()
	if last == 0 {
		return true
	}
	next := time.Unix(0, last).Add(time.Second / time.Duration(max(s.cfg.TickRate, 1)))
	return time.Until(next) <= d
}

// StateSource is the game's side of the state fan-out: it keeps the
// state of recent ticks and encodes what a client sees.
type StateSource interface {
	// EncodeState appends to dst the state of tick as viewer sees it (a
	// player id; 0 for a spectator) as a delta against base, a tick that
	// viewer acknowledged (0: a full state). ok is false if tick, or base
	// (then the caller asks again with base 0), is no longer held.
	EncodeState(dst []byte, viewer uint32, tick, base uint64) (out []byte, ok bool)
}

type serverMetrics struct {
	sessions prometheus.Gauge
	closed   *prometheus.CounterVec
	commands *prometheus.CounterVec
	ackDelay prometheus.Histogram
	updates  *prometheus.CounterVec
	upBytes  prometheus.Histogram
	// The counters of the hot paths, bound once (WithLabelValues hashes
	// and allocates per call): updates by path and kind, commands
	// stored (as the log promises) and failed.
	updDatagram, updStream updateCounters
	stored, failed         prometheus.Counter
}

// stateUpdateBuckets are state_update_bytes' buckets: powers of two from
// 64 bytes, with transport.MaxDatagramSize and the largest payload a
// datagram holds at a 1,452-byte packet (quic-go's largest, after path MTU
// discovery) among them, so that the share of updates that fit a datagram
// can be read off.
var stateUpdateBuckets = []float64{64, 128, 256, 512, 1024, transport.MaxDatagramSize, 1400, 2048, 4096, 8192, 16384, 32768, 65536, 131072}

// updateCounters are one path's state_updates_total counters by kind.
type updateCounters struct{ delta, full, dropped prometheus.Counter }

func newUpdateCounters(v *prometheus.CounterVec, path string) updateCounters {
	return updateCounters{delta: v.WithLabelValues(path, "delta"), full: v.WithLabelValues(path, "full"), dropped: v.WithLabelValues(path, "dropped")}
}

type session struct {
	conn      *transport.Conn
	st        *transport.Stream
	claims    Claims
	spectator bool
	// id is the session id of Hello (or one the server picked): with the
	// player, the log client id of the session's commands (CommandID).
	id      uint64
	ackTick atomic.Uint64
	// stateOut holds the newest state update too large for a datagram;
	// the session's writer sends it on the stream. stateFree returns the
	// buffers of frames written (or replaced) to Publish for reuse.
	stateOut  chan stateFrame
	stateFree chan []byte
	// dgramOut holds a state update for a datagram while acknowledgements
	// wait for it (acksHeld): the writer sends both, one packet.
	dgramOut  chan stateFrame
	dgramFree chan []byte
	acksHeld  atomic.Bool
	// slots holds a token per command of this session accepted and not
	// yet acknowledged or failed (Config.MaxInflight); pending counts its
	// commands queued for or inside an append worker.
	slots   chan struct{}
	pending sync.WaitGroup
	// results are acknowledgements waiting for the session's writer
	// (signalled on resReady), or, for a session that reads them in state
	// updates (acksInState), for the next datagram (Publish takes them).
	resMu    sync.Mutex
	results  []wire.CommandResult
	resReady chan struct{}
	// acksInState: the client reads acknowledgements inside state updates
	// (Hello.AcksInState; never a spectator). With a hold (Config.AckHold)
	// its acknowledgements ride in the state datagram, repeated in every
	// one until the client acknowledges a tick that carried them.
	acksInState bool
	// carried are acknowledgements sent in state datagrams and not yet
	// confirmed by a StateAck (each holds its command's slot until then);
	// spill are acknowledgements the writer must send on the stream (did
	// not fit a datagram's window, were carried too long unconfirmed, or
	// the update went on the stream). Both under resMu: an acknowledgement
	// is in exactly one of results, carried and spill, and its slot is
	// released once.
	carried []carriedAck
	spill   []wire.CommandResult
	// floor is the session's dedup floor (floor.go).
	floor sessionFloor
}

// New opens the player endpoint.
func New(cfg Config) (*Server, error) {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:4433"
	}
	if cfg.Log == nil || cfg.TLS == nil || len(cfg.Secret) < 16 {
		return nil, errors.New("server: server needs Log, TLS and a Secret of at least 16 bytes")
	}
	if len(cfg.World) > wire.MaxWelcomeWorld {
		return nil, fmt.Errorf("server: World of %d bytes exceeds %d", len(cfg.World), wire.MaxWelcomeWorld)
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 64
	}
	if cfg.MaxAppending <= 0 {
		cfg.MaxAppending = 512
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxDeltaTicks == 0 {
		cfg.MaxDeltaTicks = 15
	}
	if cfg.MaxSpectators <= 0 {
		cfg.MaxSpectators = 16
	}
	if cfg.Tick == nil {
		cfg.Tick = func() uint64 { return 0 }
	}
	if cfg.TickRate == 0 {
		cfg.TickRate = 30
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	cfg.Limits.defaults()
	if cfg.WarnRate <= 0 {
		cfg.WarnRate = 5
	}
	admit := newAdmission(cfg.Admission)
	cfg.Admission = admit.limits
	var ep *transport.Endpoint
	var err error
	// The QUIC endpoint's goroutines (its connections' loops: packing,
	// encryption, UDP I/O) carry the label quic.
	labelled(ComponentQUIC, func() {
		ep, err = transport.NewEndpoint(transport.Config{
			ListenAddr: cfg.ListenAddr, ServerTLS: cfg.TLS, ALPN: []string{wire.ALPN},
			MaxFrameSize: MaxPlayerFrame, MaxWriteFrameSize: wire.MaxSessionFrameSize, Logger: cfg.Logger,
			// State goes out as datagrams; nothing comes in as one (the
			// protocol has no client datagrams, so none are accepted).
			SendOnlyDatagrams: true,
			// One stream (the session's), none unidirectional, and
			// windows sized for commands (MaxInflight frames of at most
			// MaxPlayerFrame), not for bulk transfer: what a connection
			// can make the server buffer, before Hello and after, is
			// bounded.
			MaxIncomingStreams: 1, MaxIncomingUniStreams: -1,
			InitialStreamWindow: 16 << 10, MaxStreamWindow: 64 << 10,
			InitialConnectionWindow: 24 << 10, MaxConnectionWindow: 96 << 10,
			HandshakeTimeout:    cfg.HandshakeTimeout,
			ConnContext:         admit.connContext,
			VerifySourceAddress: admit.verifySource,
		})
		if err == nil {
			if err = ep.Listen(); err != nil {
				ep.Close()
			}
		}
	})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, ep: ep, log: cfg.Logger, players: map[uint32]*session{},
		watchers: map[*session]struct{}{}, applied: map[uint32]uint64{}, sessions: map[uint32]uint64{}, queue: newAppendQueue(),
		tokens: map[uint32]tokenUse{}, nextSweep: 1024, admit: admit, warnings: rate.NewLimiter(cfg.WarnRate, 20)}
	s.metrics = serverMetrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "server", Name: "sessions", Help: "Open player sessions."}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "server", Name: "sessions_closed_total",
			Help: "Player connections closed, by application error code."}, []string{"code"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "server", Name: "commands_total",
			Help: "Player commands by outcome (durable or replicated, as the log promises; rate_limited, failed)."}, []string{"outcome"}),
		ackDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "server", Name: "command_stored_seconds",
			Help: "Command received to stored in the log (durable or replicated, as the log promises).", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "server", Name: "state_updates_total",
			Help: "State updates sent, by path (datagram, stream) and kind (delta, full), or dropped."}, []string{"path", "kind"}),
		upBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "server", Name: "state_update_bytes",
			Help: "Size of state update frames.", Buckets: stateUpdateBuckets}),
	}
	s.metrics.updDatagram = newUpdateCounters(s.metrics.updates, "datagram")
	s.metrics.updStream = newUpdateCounters(s.metrics.updates, "stream")
	s.metrics.stored = s.metrics.commands.WithLabelValues(s.cfg.Durability.String())
	s.metrics.failed = s.metrics.commands.WithLabelValues("failed")
	cfg.Registry.MustRegister(admit.refused, admit.validated, s.metrics.sessions, s.metrics.closed, s.metrics.commands, s.metrics.ackDelay, s.metrics.updates, s.metrics.upBytes)
	return s, nil
}

// Addr returns the UDP address players connect to.
func (s *Server) Addr() string { return s.ep.Addr().String() }

// Serve accepts players until ctx ends, then closes every connection.
func (s *Server) Serve(ctx context.Context) error {
	// The append workers outlive the sessions: a session's intake waits
	// for its queued commands before it returns.
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	_, async := s.cfg.Log.(AsyncAppender)
	for i := 0; i < s.cfg.MaxAppending && !async; i++ {
		workers.Add(1)
		go func() { defer workers.Done(); labelled(ComponentIntake, func() { s.appendWorker(wctx) }) }()
	}
	defer func() {
		s.wg.Wait()
		stopWorkers()
		workers.Wait()
	}()
	defer s.ep.Close()
	for {
		conn, err := s.ep.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			var err error
			labelled(ComponentIntake, func() { err = s.serveConn(ctx, conn) })
			code := CodeOf(err)
			if err == nil || errors.Is(err, context.Canceled) {
				code = transport.CodeNormal
			}
			if code != transport.CodeNormal {
				s.warn(conn, code, err)
			}
			s.metrics.closed.WithLabelValues(code.String()).Inc()
			conn.CloseWithCode(code, closeReason(err))
		}()
	}
}

// warn logs why a connection closed, at most WarnRate times a second:
// a flood of bad connections must not become a flood of log lines.
func (s *Server) warn(conn *transport.Conn, code transport.ErrorCode, err error) {
	if !s.warnings.AllowN(s.cfg.Now(), 1) {
		s.suppressed.Add(1)
		return
	}
	if n := s.suppressed.Swap(0); n > 0 {
		s.log.Warn("closing player connection", "remote", conn.RemoteAddr().String(), "code", code.String(), "err", err, "suppressed", n)
		return
	}
	s.log.Warn("closing player connection", "remote", conn.RemoteAddr().String(), "code", code.String(), "err", err)
}

func closeReason(err error) string {
	if err == nil {
		return ""
	}
	r := err.Error()
	if len(r) > 200 {
		r = r[:200]
	}
	return r
}

func (s *Server) serveConn(ctx context.Context, conn *transport.Conn) error {
	// One deadline for the stream and the Hello on it.
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	hctx, cancel := context.WithDeadline(ctx, deadline)
	st, err := conn.AcceptStream(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: no command stream: %v", ErrProtocol, err)
	}
	st.SetReadDeadline(deadline)
	frame, err := st.ReadFrame(nil)
	if err != nil {
		if errors.Is(err, transport.ErrFrameTooLarge) {
			return fmt.Errorf("reading hello: %w", err)
		}
		return fmt.Errorf("%w: reading hello: %v", ErrProtocol, err)
	}
	st.SetReadDeadline(time.Time{})
	m, err := wire.DecodeSession(frame)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	hello, ok := m.(wire.Hello)
	if !ok || hello.Protocol != wire.ProtocolVersion {
		return fmt.Errorf("%w: first frame must be a Hello of protocol %d", ErrProtocol, wire.ProtocolVersion)
	}
	refuse := func(err error) error {
		st.WriteFrame(wire.EncodeSession(nil, wire.Goodbye{Code: uint64(CodeOf(err)), Reason: err.Error()}))
		st.Flush()
		return err
	}
	claims, err := VerifyToken(s.cfg.Secret, hello.Token, s.cfg.Now())
	if err != nil {
		return refuse(err)
	}
	if want := AudiencePlayer; hello.Spectator {
		if want = AudienceSpectator; claims.Audience != want {
			return refuse(fmt.Errorf("%w: a %s token cannot open a spectator session", ErrWrongAudience, claims.Audience))
		}
	} else if claims.Audience != want {
		return refuse(fmt.Errorf("%w: a %s token cannot open a player session", ErrWrongAudience, claims.Audience))
	}
	if s.draining.Load() {
		st.WriteFrame(wire.EncodeSession(nil, wire.Goodbye{Code: uint64(transport.CodeNormal), Reason: "server shutting down"}))
		st.Flush()
		return nil
	}
	if hello.Session == 0 {
		// A client that cannot resume: its commands still get
		// deterministic ids, in a session of this connection alone.
		hello.Session = NewSessionID()
	}
	sess := &session{conn: conn, st: st, claims: claims, spectator: hello.Spectator, id: hello.Session,
		acksInState: s.cfg.AcksInState && hello.AcksInState && !hello.Spectator, stateOut: make(chan stateFrame, 1), stateFree: make(chan []byte, 2),
		dgramOut: make(chan stateFrame, 1), dgramFree: make(chan []byte, 2),
		slots: make(chan struct{}, s.cfg.MaxInflight), resReady: make(chan struct{}, 1)}
	s.mu.Lock()
	if sess.spectator {
		// Spectators get the whole world, the costliest feed: bounded in
		// total and per token.
		mine := 0
		for w := range s.watchers {
			if w.claims.PlayerID == claims.PlayerID {
				mine++
			}
		}
		if len(s.watchers) >= s.cfg.MaxSpectators || mine >= 2 {
			s.mu.Unlock()
			reason := fmt.Sprintf("too many spectators (%d on the server, %d with this token)", len(s.watchers), mine)
			st.WriteFrame(wire.EncodeSession(nil, wire.Goodbye{Code: uint64(transport.CodeRateLimited), Reason: reason}))
			st.Flush()
			return fmt.Errorf("%w: %s", ErrFlood, reason)
		}
		s.watchers[sess] = struct{}{}
	} else {
		old := s.players[claims.PlayerID]
		if err := s.useToken(claims, sess.id, old != nil); err != nil {
			s.mu.Unlock()
			return refuse(err)
		}
		if old != nil {
			// A player reconnecting with a newer token replaces its
			// older connection.
			old.conn.CloseWithCode(transport.CodeNormal, wire.ReasonReplaced)
		}
		s.players[claims.PlayerID] = sess
		// A new session numbers its commands from 1 again; a resumed
		// one (the same session id) continues its numbering.
		if s.sessions[claims.PlayerID] != sess.id {
			delete(s.applied, claims.PlayerID)
			s.sessions[claims.PlayerID] = sess.id
		}
	}
	s.mu.Unlock()
	s.admit.helloDone(conn.Context())
	s.metrics.sessions.Inc()
	defer func() {
		s.mu.Lock()
		if s.players[claims.PlayerID] == sess {
			delete(s.players, claims.PlayerID)
		}
		delete(s.watchers, sess)
		s.mu.Unlock()
		s.metrics.sessions.Dec()
	}()
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	go labelled(ComponentFanOut, func() { sess.writeState(wctx, s.cfg.AckHold, s.updateDueWithin, s.published.Load) })
	if err := st.WriteFrame(wire.EncodeSession(nil, wire.Welcome{PlayerID: claims.PlayerID, Player: claims.Player,
		Tick: s.cfg.Tick(), TickRate: s.cfg.TickRate, MaxCommandRate: uint32(s.cfg.Limits.Rate), World: s.cfg.World})); err != nil {
		return err
	}
	s.log.Info("player joined", "player", claims.Player, "id", claims.PlayerID, "spectator", sess.spectator, "session", sess.id, "remote", conn.RemoteAddr().String())
	return s.intake(ctx, sess)
}

// intake reads the player's commands as they arrive, judges each (at its
// arrival time: the rate limit and the ack delay histogram both start
// there), and queues accepted ones for the server's append workers. The
// read loop blocks only when the player has MaxInflight commands neither
// acknowledged nor failed (its own window): a slow log delays
// acknowledgements, never the reading of state acknowledgements or the
// clock of the rate limit.
func (s *Server) intake(ctx context.Context, sess *session) error {
	in := NewIntake(sess.claims.PlayerID, s.cfg.Limits)
	if sess.spectator {
		in.Spectate()
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Wait for this session's commands still queued or being appended
	// (the workers see cctx end and give them up quickly). An
	// AsyncAppender's appends go on in the log client (which retries them
	// until stored) and settle by themselves; the session need not wait.
	if _, async := s.cfg.Log.(AsyncAppender); !async {
		defer sess.pending.Wait()
	}
	buf := make([]byte, 0, MaxPlayerFrame)
	for {
		frame, err := sess.st.ReadFrame(buf[:0])
		if err != nil {
			if cctx.Err() != nil {
				return cctx.Err()
			}
			if errors.Is(err, transport.ErrFrameTooLarge) {
				return err
			}
			return nil // the player went away
		}
		received := s.cfg.Now()
		v := in.Frame(frame, received)
		switch {
		case v.Err != nil:
			return v.Err
		case v.StateAck != 0:
			sess.ackTick.Store(v.StateAck)
			if sess.acksInState {
				sess.confirm(v.StateAck)
			}
			continue
		case v.Append == nil && v.Refusal == 0 && !v.Accepted:
			continue // nothing to do (a stale state acknowledgement)
		case !v.Accepted:
			sess.floor.receive(v.Command.Seq, true, v.Command.Settled)
			s.metrics.commands.WithLabelValues("rate_limited").Inc()
			sess.st.WriteFrame(wire.EncodeSession(nil, wire.CommandResult{Seq: v.Command.Seq, Status: v.Refusal}))
			continue
		}
		if s.cfg.Storing != nil {
			if err := s.cfg.Storing(); err != nil {
				sess.floor.receive(v.Command.Seq, true, v.Command.Settled)
				s.metrics.commands.WithLabelValues("busy").Inc()
				sess.st.WriteFrame(wire.EncodeSession(nil, wire.CommandResult{Seq: v.Command.Seq, Status: wire.AckBusy}))
				continue
			}
		}
		// Count the command in flight before looking at draining: Drain
		// sets draining, then waits for inflight to reach 0, so either it
		// sees this command or this command sees draining.
		s.inflight.Add(1)
		if s.draining.Load() {
			// Not settled: the server is going away, and the refusal
			// may not reach the player, who then resends it elsewhere.
			sess.floor.receive(v.Command.Seq, false, v.Command.Settled)
			s.inflight.Add(-1)
			sess.st.WriteFrame(wire.EncodeSession(nil, wire.CommandResult{Seq: v.Command.Seq, Status: wire.AckInvalid}))
			continue
		}
		select {
		case sess.slots <- struct{}{}:
		case <-cctx.Done():
			s.inflight.Add(-1)
			return cctx.Err()
		}
		sess.pending.Add(1)
		floor := sess.floor.receive(v.Command.Seq, false, v.Command.Settled)
		s.submit(appendJob{ctx: cctx, sess: sess, seq: v.Command.Seq, floor: floor, env: v.Append, received: received})
	}
}

// submit hands an accepted command to the log: at once to an
// AsyncAppender, else to the append workers' queue.
func (s *Server) submit(j appendJob) {
	id := CommandID(j.sess.claims.PlayerID, j.sess.id, j.seq)
	a, ok := s.cfg.Log.(AsyncAppender)
	if !ok {
		s.queue.push(j)
		return
	}
	aj := s.asyncJob(j)
	if f, ok := a.(FloorAppender); ok {
		if err := f.AppendWithFloorAsync(j.ctx, id, j.floor, j.env, aj.done); err != nil {
			aj.done(err)
		}
		return
	}
	// A resent command (after a reconnection, or to a restarted server)
	// has the id it had the first time: the log stores it once and
	// returns as for the first append.
	if err := a.AppendWithIDAsync(j.ctx, id, j.env, aj.done); err != nil {
		aj.done(err)
	}
}

// asyncJob is an appendJob handed to an AsyncAppender with its callback,
// bound once: the jobs are reused (Server.jobs), so a command costs no
// closure allocation. done settles the job and returns it to the pool;
// it is called once per use.
type asyncJob struct {
	appendJob
	done func(error)
}

// asyncJob returns a pooled asyncJob holding j.
func (s *Server) asyncJob(j appendJob) *asyncJob {
	aj, _ := s.jobs.Get().(*asyncJob)
	if aj == nil {
		aj = &asyncJob{}
		aj.done = func(err error) {
			j := aj.appendJob
			aj.appendJob = appendJob{} // keeps no session or envelope alive
			s.jobs.Put(aj)
			s.appended(j, err)
		}
	}
	aj.appendJob = j
	return aj
}

// appendJob is an accepted command waiting for an append worker.
type appendJob struct {
	ctx      context.Context // the session's intake: a job of a closed session is given up
	sess     *session
	seq      uint64
	floor    uint64 // the session's floor when it was received (floor.go)
	env      []byte
	received time.Time
}

// appendQueue is the FIFO of accepted commands between the sessions' read
// loops and the append workers. It is bounded by the sessions' windows
// (each job holds one of its session's MaxInflight slots), so pushing never
// blocks a read loop.
type appendQueue struct {
	mu   sync.Mutex
	jobs []appendJob
	head int
	wake chan struct{} // one pending signal: jobs are waiting
}

func newAppendQueue() *appendQueue { return &appendQueue{wake: make(chan struct{}, 1)} }

func (q *appendQueue) push(j appendJob) {
	q.mu.Lock()
	if q.head > 0 && q.head == len(q.jobs) {
		q.jobs, q.head = q.jobs[:0], 0
	}
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the oldest job, waiting for one until ctx ends.
func (q *appendQueue) pop(ctx context.Context) (appendJob, bool) {
	for {
		q.mu.Lock()
		if q.head < len(q.jobs) {
			j := q.jobs[q.head]
			q.jobs[q.head] = appendJob{}
			q.head++
			more := q.head < len(q.jobs)
			if q.head > 1024 && q.head*2 > len(q.jobs) {
				q.jobs, q.head = append(q.jobs[:0], q.jobs[q.head:]...), 0
			}
			q.mu.Unlock()
			if more {
				select { // pass the signal on to another worker
				case q.wake <- struct{}{}:
				default:
				}
			}
			return j, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return appendJob{}, false
		}
	}
}

// appendWorker appends queued commands, one at a time, until ctx ends;
// the server runs MaxAppending of them (the cap on commands of all players
// waiting for the log). Acknowledgements go to the session's writer, so a
// client that stops reading holds up only its own writes.
func (s *Server) appendWorker(ctx context.Context) {
	for {
		j, ok := s.queue.pop(ctx)
		if !ok {
			return
		}
		err := j.ctx.Err()
		if err == nil {
			// A resent command (after a reconnection, or to a restarted
			// server) has the id it had the first time: the log stores
			// it once and returns as for the first append.
			err = s.cfg.Log.AppendWithID(j.ctx, CommandID(j.sess.claims.PlayerID, j.sess.id, j.seq), j.env)
		}
		s.appended(j, err)
	}
}

// appended settles a command the log stored (err nil: acknowledge it) or
// failed to.
func (s *Server) appended(j appendJob, err error) {
	s.inflight.Add(-1)
	if err != nil {
		s.metrics.failed.Inc()
		<-j.sess.slots
	} else {
		j.sess.floor.stored(j.seq)
		s.metrics.stored.Inc()
		s.metrics.ackDelay.Observe(s.cfg.Now().Sub(j.received).Seconds())
		j.sess.queueResult(wire.CommandResult{Seq: j.seq, Status: s.cfg.Durability.AckStatus()})
	}
	j.sess.pending.Done()
}

// spilled reports whether acknowledgements wait in spill.
func (sess *session) spilled() bool {
	sess.resMu.Lock()
	defer sess.resMu.Unlock()
	return len(sess.spill) > 0
}

// queueResult hands an acknowledgement to the session's writer, which
// releases the command's slot once it has written it.
func (sess *session) queueResult(r wire.CommandResult) {
	sess.resMu.Lock()
	sess.results = append(sess.results, r)
	sess.resMu.Unlock()
	sess.signalResults()
}

// signalResults wakes the session's writer: acknowledgements wait.
func (sess *session) signalResults() {
	select {
	case sess.resReady <- struct{}{}:
	default:
	}
}

// writeState writes the session's acknowledgements and the state updates
// handed to it on its stream until ctx ends; a slow client only delays its
// own writes. Acknowledgements waiting go out together (one flush: fewer
// packets) and with the next state update: with hold > 0, when due(hold)
// says the update is expected within hold, they wait for it up to hold
// (Config.AckHold), so that the acknowledgements and the update share a
// packet instead of taking one each.
//
// A session that reads acknowledgements in state updates (acksInState)
// has them carried inside the datagrams by Publish instead: the writer
// then holds them while updates keep coming (at least one in every two
// holds; the hold starts again after each), and writes on the stream what
// two holds without an update left, and what Publish spilled.
func (sess *session) writeState(ctx context.Context, hold time.Duration, due func(time.Duration) bool, published func() int64) {
	var results []wire.CommandResult
	var buf []byte
	var err error // once the stream fails, writes stop but slots are still released
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	held := false
	var heldAt int64 // when the hold started (UnixNano; acksInState)
	// bufferResults queues results on the stream, unflushed.
	bufferResults := func() {
		for _, r := range results {
			if err != nil {
				break
			}
			buf = wire.AppendCommandResult(buf[:0], r)
			err = sess.st.BufferFrame(buf)
		}
	}
	// buffer queues the acknowledgements waiting on the stream, unflushed,
	// and returns how many.
	buffer := func() int {
		sess.resMu.Lock()
		results, sess.results = sess.results, results[:0]
		results = append(results, sess.spill...)
		sess.spill = sess.spill[:0]
		sess.resMu.Unlock()
		bufferResults()
		return len(results)
	}
	// written releases the slots of n acknowledgements written.
	written := func(n int) {
		for range n {
			<-sess.slots
		}
		if held {
			held = false
			sess.acksHeld.Store(false)
			timer.Stop()
		}
	}
	flush := func() {
		n := buffer()
		if err == nil {
			err = sess.st.Flush()
		}
		written(n)
	}
	// writeSpill writes only the spilled acknowledgements (the others
	// still wait for a datagram).
	writeSpill := func() {
		sess.resMu.Lock()
		results, sess.spill = append(results[:0], sess.spill...), sess.spill[:0]
		sess.resMu.Unlock()
		bufferResults()
		if err == nil {
			err = sess.st.Flush()
		}
		for range results {
			<-sess.slots
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-sess.stateOut:
			n := buffer()
			if err == nil {
				err = sess.st.WriteFrame(f.b) // copies f.b; writes the acknowledgements with it
			}
			written(n)
			sess.recycle(f.b)
		case f := <-sess.dgramOut:
			// The datagram first: QUIC packs the acknowledgements written
			// right after into its packet while it has not sent it yet
			// (with acksInState they are inside it already).
			sendErr := sess.conn.SendDatagram(f.b)
			switch {
			case sendErr == nil:
				f.sent.Inc()
			case errors.Is(sendErr, transport.ErrDatagramTooLarge) && f.onStream != nil:
				// Publish guessed the room (transport.Conn.DatagramRoom)
				// and QUIC's packets are still smaller: the update goes
				// on the stream, with the acknowledgements waiting.
				n := buffer()
				if err == nil {
					err = sess.st.WriteFrame(f.b)
				}
				written(n)
				f.onStream.Inc()
				sess.recycleDatagram(f.b)
				continue
			default:
				f.dropped.Inc()
			}
			if !sess.acksInState {
				flush()
			}
			sess.recycleDatagram(f.b)
		case <-sess.resReady:
			if hold <= 0 || !held && !due(hold) {
				flush()
				continue
			}
			if sess.acksInState {
				// Publish takes the acknowledgements into the next
				// datagram; what it spills, and whatever is left when
				// the hold ends, goes on the stream.
				if sess.spilled() {
					writeSpill()
				}
				if !held {
					held = true
					heldAt = time.Now().UnixNano()
					timer.Reset(hold)
				}
				continue
			}
			if !held {
				held = true
				sess.acksHeld.Store(true)
				timer.Reset(hold)
			}
		case <-timer.C:
			if !held {
				continue
			}
			if sess.acksInState {
				sess.resMu.Lock()
				waiting := len(sess.results) > 0 || len(sess.spill) > 0
				sess.resMu.Unlock()
				if !waiting {
					held = false
					continue
				}
				if published() > heldAt-int64(hold) && due(hold) {
					// An update went out during the hold or the one
					// before (and took what waited then; a tick late under
					// load is common): the rest waits for the next one.
					heldAt = time.Now().UnixNano()
					timer.Reset(hold)
					continue
				}
			}
			flush()
		}
	}
}

// carriedAck is an acknowledgement carried in state datagrams since the
// update of tick first.
type carriedAck struct {
	seq, first uint64
}

// ackRepairTicks is how many ticks an acknowledgement rides in state
// datagrams without the client confirming one (StateAck of a tick at or
// after its first) before it goes on the stream as well: a client that
// does not acknowledge state still gets every acknowledgement reliably,
// and its slots back.
const ackRepairTicks = 30

// takeAcks moves the acknowledgements waiting for a datagram into carried
// (from tick t) and returns the window of every carried one, for the
// update of tick t. Those outside the window, and those carried for
// ackRepairTicks, move to spill for the writer (spilled reports it). Every
// acknowledgement in carried when the update of t is built is in its
// window: a StateAck of any tick ≥ first confirms it (confirm).
func (sess *session) takeAcks(t uint64, status wire.AckStatus) (w wire.AckWindow, spilled bool) {
	sess.resMu.Lock()
	defer sess.resMu.Unlock()
	for _, r := range sess.results {
		sess.carried = append(sess.carried, carriedAck{seq: r.Seq, first: t})
	}
	sess.results = sess.results[:0]
	if len(sess.carried) == 0 {
		return w, false
	}
	low := sess.carried[0].seq
	for _, a := range sess.carried[1:] {
		low = min(low, a.seq)
	}
	w.Status = status
	w.From = low
	kept := sess.carried[:0]
	for _, a := range sess.carried {
		if (t < a.first || t-a.first < ackRepairTicks) && w.Add(a.seq) {
			kept = append(kept, a)
			continue
		}
		sess.spill = append(sess.spill, wire.CommandResult{Seq: a.seq, Status: status})
		spilled = true
	}
	clear(sess.carried[len(kept):])
	sess.carried = kept
	if w.Bits == 0 {
		w = wire.AckWindow{}
	}
	return w, spilled
}

// spillCarried moves every carried acknowledgement to spill: the update
// that would carry them goes on the stream, and they with it.
func (sess *session) spillCarried(status wire.AckStatus) {
	sess.resMu.Lock()
	for _, a := range sess.carried {
		sess.spill = append(sess.spill, wire.CommandResult{Seq: a.seq, Status: status})
	}
	sess.carried = sess.carried[:0]
	sess.resMu.Unlock()
}

// confirm drops the carried acknowledgements a StateAck of tick confirms
// (those carried since a tick ≤ tick: the update of tick carried them) and
// releases their slots.
func (sess *session) confirm(tick uint64) {
	sess.resMu.Lock()
	n := 0
	kept := sess.carried[:0]
	for _, a := range sess.carried {
		if a.first <= tick {
			n++
			continue
		}
		kept = append(kept, a)
	}
	clear(sess.carried[len(kept):])
	sess.carried = kept
	sess.resMu.Unlock()
	for range n {
		<-sess.slots
	}
}

// NoteApplied records that the command seq of player was applied (it was
// an input of a tick): state updates tell the player so, so that it can
// reconcile its predictions. Call it in log order, before Publish of the
// tick.
func (s *Server) NoteApplied(player uint32, seq uint64) {
	s.mu.Lock()
	if seq > s.applied[player] {
		s.applied[player] = seq
	}
	s.mu.Unlock()
}

// Publish sends every session the state of tick (spectators: of tick minus
// SpectatorDelay): a delta against the last tick the client acknowledged,
// as a datagram when it fits, else on its stream. Call it from one
// goroutine, once per tick, after the game's StateSource holds tick.
func (s *Server) Publish(tick uint64) {
	if s.cfg.State == nil {
		return
	}
	labelled(ComponentFanOut, func() { s.publish(tick) })
}

// stateFrame is a state update handed to a session's writer, with the
// counters of its fate.
type stateFrame struct {
	b             []byte
	sent, dropped prometheus.Counter
	// onStream, for a datagram larger than transport.MaxDatagramSize,
	// counts it sent on the stream instead when QUIC refuses it as too
	// large (its packets are smaller than Publish guessed).
	onStream prometheus.Counter
}

// recycle hands a state frame's buffer back to Publish (dropped if two
// are waiting already).
func (sess *session) recycle(frame []byte) {
	select {
	case sess.stateFree <- frame[:0]:
	default:
	}
}

// recycleDatagram is recycle for datagrams.
func (sess *session) recycleDatagram(frame []byte) {
	select {
	case sess.dgramFree <- frame[:0]:
	default:
	}
}

// handOff puts f on out for the writer, replacing (and recycling) a
// frame it did not take yet.
func handOff(out chan stateFrame, f stateFrame, recycle func([]byte)) {
	select {
	case old := <-out:
		old.dropped.Inc()
		recycle(old.b)
	default:
	}
	select {
	case out <- f:
	default: // the writer's slot was refilled meanwhile: impossible, Publish is the only sender
		f.dropped.Inc()
		recycle(f.b)
	}
}

// target is a session Publish sends a tick to.
type target struct {
	sess    *session
	applied uint64
}

func (s *Server) publish(tick uint64) {
	s.published.Store(time.Now().UnixNano())
	s.mu.Lock()
	targets := s.targets[:0]
	for _, sess := range s.players {
		targets = append(targets, target{sess, s.applied[sess.claims.PlayerID]})
	}
	for sess := range s.watchers {
		targets = append(targets, target{sess: sess})
	}
	s.mu.Unlock()
	defer func() {
		clear(targets) // no session kept alive by the scratch
		s.targets = targets[:0]
	}()
	for _, tg := range targets {
		sess, t, viewer := tg.sess, tick, tg.sess.claims.PlayerID
		if sess.spectator {
			if tick <= s.cfg.SpectatorDelay {
				continue
			}
			t, viewer = tick-s.cfg.SpectatorDelay, 0
		}
		base := sess.ackTick.Load()
		if base >= t || t-base > s.cfg.MaxDeltaTicks {
			base = 0
		}
		payload, ok := s.cfg.State.EncodeState(s.state[:0], viewer, t, base)
		if !ok && base != 0 {
			base = 0
			payload, ok = s.cfg.State.EncodeState(s.state[:0], viewer, t, 0)
		}
		if !ok {
			continue
		}
		s.state = payload
		u := wire.StateUpdate{Tick: t, BaseTick: base, LastAppliedSeq: tg.applied, Payload: payload}
		inState := sess.acksInState && s.cfg.AckHold > 0 && sess.conn.DatagramsEnabled()
		if inState {
			var spilled bool
			u.Acked, spilled = sess.takeAcks(t, s.cfg.Durability.AckStatus())
			if spilled {
				sess.signalResults()
			}
		}
		s.frame = wire.AppendStateUpdate(s.frame[:0], u)
		if inState && len(s.frame) > transport.MaxDatagramSize {
			// The update goes on the stream, and the acknowledgements
			// with it (the writer writes them before it).
			sess.spillCarried(s.cfg.Durability.AckStatus())
			sess.signalResults()
			if !u.Acked.Empty() {
				u.Acked = wire.AckWindow{}
				s.frame = wire.AppendStateUpdate(s.frame[:0], u)
			}
		}
		s.metrics.upBytes.Observe(float64(len(s.frame)))
		// An update goes as a datagram when it fits the room QUIC's
		// packets have now (up to transport.MaxDatagramCeiling once path
		// MTU discovery raised them), leaving room for an ACK beside it;
		// acknowledgements carried inside it keep to the size that fits
		// every packet (a refused one would take them to the stream).
		room := sess.conn.DatagramRoom()
		if inState {
			room = min(room, transport.MaxDatagramSize)
		}
		counters := &s.metrics.updDatagram
		if len(s.frame) > room {
			counters = &s.metrics.updStream
		}
		sent, onStream := counters.delta, s.metrics.updStream.delta
		if base == 0 {
			sent, onStream = counters.full, s.metrics.updStream.full
		}
		if len(s.frame) <= transport.MaxDatagramSize {
			onStream = nil // always fits: a refusal is a drop
		}
		// The session's writer sends it: quic-go's SendDatagram waits
		// while the connection's queue (32) is full, which a player whose
		// downlink died (no acknowledgements: the congestion window stays
		// full) keeps it until the connection ends; here that would stop
		// every other player's updates. The writer owns a frame handed to
		// it until it gives its buffer back; a newer one replaces a frame
		// it has not taken yet (dropped).
		out, free, recycle := sess.stateOut, sess.stateFree, sess.recycle
		if counters == &s.metrics.updDatagram {
			out, free, recycle = sess.dgramOut, sess.dgramFree, sess.recycleDatagram
		}
		var frame []byte
		select {
		case frame = <-free:
		default:
		}
		handOff(out, stateFrame{b: append(frame[:0], s.frame...), sent: sent, dropped: counters.dropped, onStream: onStream}, recycle)
		if out == sess.stateOut {
			sent.Inc() // queued for the stream (a later one may replace it: dropped)
		}
	}
}

// Drain stops intake: new sessions are turned away and commands refused
// (status Invalid); it returns when the commands already accepted are
// durable (or failed), or when ctx ends. Sessions stay open and state
// updates keep flowing until Serve's context ends.
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for s.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: drain: %d commands still in flight: %w", s.inflight.Load(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
