// Package bots is the load-bot harness: N headless players, each with its
// own QUIC connection and token, playing Broadside at a fixed command rate
// from the state the server sends them, and measuring what the server gives
// back: command-to-acknowledged (durable or replicated, as the server
// says) and command-to-applied latency, state update jitter, bandwidth and
// errors. Bots reconnect after a lost connection or a server restart
// (netcode/client's Reconnect) and count their reconnections and resent
// commands.
package bots

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// Behaviours of Config.Behaviour.
const (
	// Captain steers toward the nearest enemy it sees in its state
	// updates and fires the broadside that bears (broadside.BotCommand).
	Captain = "captain"
	// Random steers and fires at random, blind to the state.
	Random = "random"
)

// Config configures a run.
type Config struct {
	// Server is the game server's UDP address.
	Server string
	// TLS trusts the server's certificate.
	TLS *tls.Config
	// Secret mints one token per bot (development); bots are players
	// "bot-1".."bot-N" (with Prefix "bot-").
	Secret []byte
	Prefix string
	// Players, if set, assigns the bots' player ids (by name, kept across
	// runs: 'broadside bots' uses the registry beside the secret);
	// without it bot i (from 0) is player FirstID+i (default
	// server.EphemeralIDBase+1), ids no Registry assigns.
	Players *server.Registry
	FirstID uint32
	// N bots, each sending Rate commands per second for Duration.
	N        int
	Rate     float64
	Duration time.Duration
	// Behaviour is Captain (default) or Random.
	Behaviour string
	Seed      uint64
	// Window bounds each bot's commands awaiting their
	// acknowledgement (default 64): a bot whose window is full skips its
	// turn, as a real client would wait, so an overloaded server shows
	// as fewer commands sent (Skipped) rather than ever-growing queues.
	Window int
	// Progress, if set, is called about once a second.
	Progress func(Snapshot)
	// OnDurable, if set, is called for every command acknowledged as
	// durable (from the bots' goroutines), so a caller can check later
	// that the log holds each.
	OnDurable func(player uint32, seq uint64)
	// OnAck, if set, is called for every command acknowledged as stored,
	// durable or replicated (status says which).
	OnAck func(player uint32, seq uint64, status wire.AckStatus)
	// NoReconnect keeps each bot on its first connection: by default a
	// bot reconnects after a lost connection or a server restart, resuming
	// its session and resending what was not acknowledged.
	NoReconnect bool
	// ReconnectAttempts bounds a bot's consecutive failed reconnection
	// attempts (default 10, with backoff from 50ms to 2s).
	ReconnectAttempts int
	// BotsPerSocket is how many bots share one UDP socket (default 32;
	// 1: a socket each, as separate clients would have). The server tells
	// connections apart by their QUIC connection ids, not by address, and
	// a shared socket costs the harness one receive loop, reading several
	// packets per system call, instead of one per bot.
	BotsPerSocket int
}

// Snapshot is the state of a run at one moment (latencies of the last
// second).
type Snapshot struct {
	Elapsed      time.Duration `json:"elapsed_ns"`
	Connected    int           `json:"connected"`
	Sent         int64         `json:"sent"`
	Durable      int64         `json:"durable"`
	Replicated   int64         `json:"replicated"`
	Applied      int64         `json:"applied"`
	P50us        int64         `json:"ack_p50_us"`
	P99us        int64         `json:"ack_p99_us"`
	AppliedP99us int64         `json:"applied_p99_us"`
	Updates      int64         `json:"updates"`
}

// Report is the outcome of a run.
type Report struct {
	Bots        int     `json:"bots"`
	Behaviour   string  `json:"behaviour"`
	RatePerBot  float64 `json:"rate_per_bot"`
	DurationSec float64 `json:"duration_s"`
	Sent        int64   `json:"sent"`
	// Acknowledged as stored, by what the server said: Durable (fsynced
	// on every sequencing replica) or Replicated (in memory on every
	// sequencing replica); Acked is their sum. AckStatus names them for
	// people: "durable", "replicated", "durable and replicated" or "none".
	Durable     int64  `json:"durable"`
	Replicated  int64  `json:"replicated"`
	Acked       int64  `json:"acked"`
	AckStatus   string `json:"ack_status"`
	Applied     int64  `json:"applied"`
	RateLimited int64  `json:"rate_limited"`
	// Reconnects counts the bots' sessions resumed on a new connection,
	// Resent the commands sent again after one (the server stores each
	// once).
	Reconnects int64 `json:"reconnects"`
	Resent     int64 `json:"resent"`
	// Skipped counts turns a bot skipped with its window full.
	Skipped int64            `json:"skipped_window_full"`
	Errors  map[string]int64 `json:"errors"`
	// FirstErrors holds, for the error kinds that have one, the message
	// of the first error of the kind (what failed, on which tick).
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	// Command sent to its acknowledgement (AckStatus), microseconds, for
	// commands sent and acknowledged on one connection: one round trip
	// to the log.
	AckP50us  int64 `json:"ack_p50_us"`
	AckP99us  int64 `json:"ack_p99_us"`
	AckP999us int64 `json:"ack_p999_us"`
	AckMaxus  int64 `json:"ack_max_us"`
	// The same for commands that waited across a reconnection (ResentAcks
	// of them): sent, connection lost, resent, acknowledged; it includes
	// the outage.
	ResentAcks     int64 `json:"resent_acks"`
	ResentAckP50us int64 `json:"resent_ack_p50_us"`
	ResentAckMaxus int64 `json:"resent_ack_max_us"`
	// Command sent to the first state update saying a tick applied it.
	AppliedP50us  int64 `json:"applied_p50_us"`
	AppliedP99us  int64 `json:"applied_p99_us"`
	AppliedP999us int64 `json:"applied_p999_us"`
	// State updates: received and applied per client per second, and
	// the jitter of their inter-arrival times (|gap - tick period|).
	UpdatesPerSec float64 `json:"updates_per_sec_per_client"`
	JitterP50us   int64   `json:"jitter_p50_us"`
	JitterP99us   int64   `json:"jitter_p99_us"`
	// Bytes per second per client, on the wire (QUIC packets).
	UpBytesPerSec   float64 `json:"up_bytes_per_sec_per_client"`
	DownBytesPerSec float64 `json:"down_bytes_per_sec_per_client"`
	// QUIC packets per second per client: up are those the server
	// received, down those it sent.
	UpPacketsPerSec   float64 `json:"up_packets_per_sec_per_client"`
	DownPacketsPerSec float64 `json:"down_packets_per_sec_per_client"`
	// AckedInState counts the commands whose acknowledgement came
	// inside a state update (client.Client.AckedInState) rather than on
	// the stream.
	AckedInState int64 `json:"acked_in_state"`
	// Timeline holds per-second figures.
	Timeline []Snapshot `json:"timeline"`
}

type sentCmd struct {
	seq uint64
	at  time.Time
}

// waiting is a command waiting for its acknowledgement: when it was sent
// and the client's reconnection count then.
type waiting struct {
	at         time.Time
	reconnects uint64
}

// bot is one player. Its connection's readers deliver verdicts and state
// updates straight into it (client.Config.OnResult, OnUpdate): a bot owns
// no goroutine, and its turns are taken by its socket group's driver
// (playGroup).
type bot struct {
	c      *client.Client
	player uint32
	mu     sync.Mutex
	acks   map[uint64]waiting // commands waiting for their acknowledgement
	queue  []sentCmd          // commands waiting to be applied, by seq
	frame  atomic.Pointer[broadside.Frame]

	// The state updates' side, under mu (a connection's two readers
	// may both deliver updates). The tracker keeps only the latest frame
	// and those of the ticks the bot acknowledged (Pinned), and builds
	// each frame in the memory of one it let go: the bot reads only
	// frame, the latest, and only under mu, which Apply holds too.
	tr         broadside.StateTracker
	last       time.Time // arrival of the previous update applied
	reconnects uint64    // the client's reconnections when the tracker started
	resyncing  bool
	period     time.Duration // the server's tick period

	// ackTick is the newest tick applied and not yet handed to the
	// client's AckState (under mu): the group's driver hands it over at
	// the bot's next turn, just before the command it then rides with,
	// so that the readers never wait for the client's writer. It hands
	// over (and pins in the tracker) a tick at least stateAckEvery after
	// the last one it handed over (lastAcked), so that the tracker holds
	// every tick the server may base a delta on.
	ackTick, lastAcked uint64
	// seq is the last sequence number the bot gave a command (under mu).
	seq uint64

	// The turns' side, only the group's driver touches these.
	rng  *rand.Rand
	next time.Time // the next turn
}

// stats are a run's shared counters and histograms.
type stats struct {
	mu                       sync.Mutex
	ack, ackWin, app, appWin *hdrhistogram.Histogram
	ackResent                *hdrhistogram.Histogram
	jitter                   *hdrhistogram.Histogram
	sent, durable, applied   int64
	replicated               int64
	limited, updates         int64
	skipped                  int64
	errors                   map[string]int64
	firstErr                 map[string]string // the first message of each error kind
	// running is set when every bot has connected and the run's clock
	// starts: the state updates of the bots that connected early are
	// applied as they come, but counted from then on. closed is set
	// when the run has read its figures: a reader still delivering
	// afterwards records nothing.
	running, closed bool
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

func (s *stats) err(kind string) {
	s.mu.Lock()
	if !s.closed {
		s.errors[kind]++
	}
	s.mu.Unlock()
}

// errDetail counts an error of kind and keeps the first message of each
// kind for the report.
func (s *stats) errDetail(kind, detail string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.errors[kind]++
	if _, ok := s.firstErr[kind]; !ok {
		s.firstErr[kind] = detail
	}
	s.mu.Unlock()
}

// StateErrorKind names a state update the bot could not apply, for the
// report's error counts: "state: base not held" (a delta against a tick
// the bot no longer holds: lost or reordered updates), "state: malformed"
// (the update does not decode against its base: a server or codec bug),
// or "state: other".
func StateErrorKind(err error) string {
	switch {
	case errors.Is(err, broadside.ErrBaseNotHeld):
		return "state: base not held"
	case errors.Is(err, broadside.ErrBadState):
		return "state: malformed"
	}
	return "state: other"
}

// Run runs the bots and reports.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.N <= 0 || cfg.Rate <= 0 || cfg.Duration <= 0 {
		return Report{}, errors.New("bots: N, Rate and Duration must be positive")
	}
	if cfg.Behaviour == "" {
		cfg.Behaviour = Captain
	}
	if cfg.Behaviour != Captain && cfg.Behaviour != Random {
		return Report{}, fmt.Errorf("bots: unknown behaviour %q (captain or random)", cfg.Behaviour)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "bot-"
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.ReconnectAttempts <= 0 {
		cfg.ReconnectAttempts = 10
	}
	if cfg.BotsPerSocket <= 0 {
		cfg.BotsPerSocket = 32
	}
	rep := Report{Bots: cfg.N, RatePerBot: cfg.Rate, Behaviour: cfg.Behaviour}
	st := &stats{ack: newHist(), ackWin: newHist(), app: newHist(), appWin: newHist(), ackResent: newHist(), jitter: newHist(), errors: map[string]int64{}, firstErr: map[string]string{}}

	// Player ids: assigned, never derived from the names.
	names := make([]string, cfg.N)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", cfg.Prefix, i+1)
	}
	ids := make(map[string]uint32, cfg.N)
	if cfg.Players != nil {
		var err error
		if ids, err = cfg.Players.IDs(names); err != nil {
			return rep, fmt.Errorf("bots: player ids: %w", err)
		}
	} else {
		first := cfg.FirstID
		if first == 0 {
			first = server.EphemeralIDBase + 1
		}
		if uint64(first)+uint64(cfg.N) > 1<<32 {
			return rep, fmt.Errorf("bots: %d bots from id %d overflow 32 bits", cfg.N, first)
		}
		for i, n := range names {
			ids[n] = first + uint32(i)
		}
	}

	// The shared sockets, closed after the bots' clients.
	var endpoints []*transport.Endpoint
	defer func() {
		for _, ep := range endpoints {
			ep.Close()
		}
	}()
	if cfg.BotsPerSocket > 1 {
		for range (cfg.N + cfg.BotsPerSocket - 1) / cfg.BotsPerSocket {
			ecfg := client.Config{TLS: cfg.TLS}
			if !cfg.NoReconnect {
				ecfg.Reconnect.Attempts = cfg.ReconnectAttempts // its timeouts
			}
			ep, err := client.NewEndpoint(ecfg)
			if err != nil {
				return rep, fmt.Errorf("bots: socket: %w", err)
			}
			endpoints = append(endpoints, ep)
		}
	}
	// Connect every bot, a few at a time.
	bots := make([]*bot, cfg.N)
	var cwg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range cfg.N {
		cwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer cwg.Done()
			defer func() { <-sem }()
			name := names[i]
			// A fresh token for every connection: tokens expire, and a
			// reconnection takes over the old session only with a
			// newer token.
			tokens := func(context.Context) (string, error) {
				return server.IssueToken(cfg.Secret, server.Claims{Player: name, PlayerID: ids[name], Audience: server.AudiencePlayer,
					Expires: time.Now().Add(min(cfg.Duration+time.Hour, server.MaxTokenLifetime))})
			}
			if _, err := tokens(ctx); err != nil {
				st.err("token")
				return
			}
			b := &bot{acks: map[uint64]waiting{}, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
			b.tr.Pinned = true
			// The bot hands its state acknowledgements to the client at
			// its next turn, just before that turn's command (bot.turn),
			// which they ride with in one packet.
			// The bot picks the ticks it acknowledges (stateAckEvery):
			// the client sends each it is given.
			ccfg := client.Config{Addr: cfg.Server, TLS: cfg.TLS, TokenSource: tokens, StateAckEvery: 1,
				OnResult: func(r wire.CommandResult) { b.onResult(r, st, cfg.OnDurable, cfg.OnAck) },
				OnUpdate: func(u wire.StateUpdate) { b.onUpdate(u, st) }}
			if len(endpoints) > 0 {
				ccfg.Endpoint = endpoints[i/cfg.BotsPerSocket]
			}
			if !cfg.NoReconnect {
				ccfg.Reconnect = client.Reconnect{Attempts: cfg.ReconnectAttempts,
					Rand: rand.New(rand.NewPCG(cfg.Seed, 1<<32|uint64(i)))}
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			c, err := client.Dial(dctx, ccfg)
			cancel()
			if err != nil {
				st.err("connect")
				return
			}
			b.mu.Lock()
			b.c, b.player = c, c.Welcome().PlayerID
			b.period = time.Second / time.Duration(max(c.Welcome().TickRate, 1))
			b.mu.Unlock()
			bots[i] = b
		}()
	}
	cwg.Wait()
	live := bots[:0]
	for _, b := range bots {
		if b != nil {
			live = append(live, b)
		}
	}
	bots = live
	defer func() {
		for _, b := range bots {
			b.c.Close()
		}
	}()
	if len(bots) == 0 {
		return rep, fmt.Errorf("bots: no bot could connect to %s", cfg.Server)
	}
	start := time.Now()
	st.mu.Lock()
	st.running = true
	st.mu.Unlock()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	// The bots' turns: one driver per socket group (the bots that share
	// a socket, or BotsPerSocket of them), stepping its bots in turn on
	// one timer, instead of a goroutine and a timer per bot.
	var wg sync.WaitGroup
	for lo := 0; lo < len(bots); lo += cfg.BotsPerSocket {
		group := bots[lo:min(lo+cfg.BotsPerSocket, len(bots))]
		wg.Add(1)
		go func() { defer wg.Done(); playGroup(runCtx, cfg, group, st) }()
	}
	// Progress and timeline, once a second.
	tick := time.NewTicker(time.Second)
	func() {
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				st.mu.Lock()
				s := Snapshot{Elapsed: time.Since(start).Round(time.Second), Connected: len(bots), Sent: st.sent, Durable: st.durable,
					Replicated: st.replicated, Applied: st.applied, P50us: st.ackWin.ValueAtQuantile(50), P99us: st.ackWin.ValueAtQuantile(99),
					AppliedP99us: st.appWin.ValueAtQuantile(99), Updates: st.updates}
				st.ackWin.Reset()
				st.appWin.Reset()
				rep.Timeline = append(rep.Timeline, s)
				st.mu.Unlock()
				if cfg.Progress != nil {
					cfg.Progress(s)
				}
			}
		}
	}()
	elapsed := time.Since(start)
	// Let acknowledgements in flight arrive (up to 5 s), then close.
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		outstanding := 0
		for _, b := range bots {
			b.mu.Lock()
			outstanding += len(b.acks)
			b.mu.Unlock()
		}
		if outstanding == 0 || ctx.Err() != nil {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // the last state updates
	var up, down, pktUp, pktDown uint64
	for _, b := range bots {
		s, r := b.c.Stats()
		up += s
		down += r
		s, r = b.c.PacketStats()
		pktUp += s
		pktDown += r
		rep.Reconnects += int64(b.c.Reconnects())
		rep.Resent += int64(b.c.Resent())
		rep.AckedInState += int64(b.c.AckedInState())
	}
	wg.Wait()
	for _, b := range bots {
		b.c.Close()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	for _, b := range bots {
		// Sessions the server closed for something other than a normal
		// end (Close's own end is normal).
		if err := b.c.Err(); err != nil {
			if code, _, ok := transport.ErrorCodeOf(err); ok && code != transport.CodeNormal {
				st.errors["closed:"+code.String()]++
			}
		}
	}
	bots = nil
	rep.DurationSec = elapsed.Seconds()
	rep.Sent, rep.Durable, rep.Applied, rep.RateLimited, rep.Skipped = st.sent, st.durable, st.applied, st.limited, st.skipped
	rep.Replicated, rep.Acked = st.replicated, st.durable+st.replicated
	rep.AckStatus = AckStatusOf(rep.Durable, rep.Replicated)
	rep.ResentAcks, rep.ResentAckP50us, rep.ResentAckMaxus = st.ackResent.TotalCount(), st.ackResent.ValueAtQuantile(50), st.ackResent.Max()
	rep.Errors, rep.FirstErrors = st.errors, st.firstErr
	rep.AckP50us, rep.AckP99us, rep.AckP999us, rep.AckMaxus = st.ack.ValueAtQuantile(50), st.ack.ValueAtQuantile(99), st.ack.ValueAtQuantile(99.9), st.ack.Max()
	rep.AppliedP50us, rep.AppliedP99us, rep.AppliedP999us = st.app.ValueAtQuantile(50), st.app.ValueAtQuantile(99), st.app.ValueAtQuantile(99.9)
	rep.JitterP50us, rep.JitterP99us = st.jitter.ValueAtQuantile(50), st.jitter.ValueAtQuantile(99)
	n := float64(rep.Bots) * elapsed.Seconds()
	rep.UpBytesPerSec, rep.DownBytesPerSec = float64(up)/n, float64(down)/n
	rep.UpPacketsPerSec, rep.DownPacketsPerSec = float64(pktUp)/n, float64(pktDown)/n
	rep.UpdatesPerSec = float64(st.updates) / n
	return rep, nil
}

// AckStatusOf names what acknowledgements said, for reports: "durable",
// "replicated", "durable and replicated" (a run across servers of both
// kinds) or "none". Replicated is never reported as durable.
func AckStatusOf(durable, replicated int64) string {
	switch {
	case durable > 0 && replicated > 0:
		return "durable and replicated"
	case replicated > 0:
		return wire.AckReplicated.String()
	case durable > 0:
		return wire.AckDurable.String()
	}
	return "none"
}

// onResult records a verdict (client.Config.OnResult: on the connection's
// reader).
func (b *bot) onResult(r wire.CommandResult, st *stats, onDurable func(uint32, uint64), onAck func(uint32, uint64, wire.AckStatus)) {
	b.mu.Lock()
	w, ok := b.acks[r.Seq]
	delete(b.acks, r.Seq)
	player, c := b.player, b.c
	b.mu.Unlock()
	if !ok {
		return
	}
	if r.Status.Stored() && onAck != nil {
		onAck(player, r.Seq, r.Status)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	switch r.Status {
	case wire.AckDurable, wire.AckReplicated:
		if r.Status == wire.AckDurable {
			st.durable++
			if onDurable != nil {
				onDurable(player, r.Seq)
			}
		} else {
			st.replicated++
		}
		us := max(time.Since(w.at).Microseconds(), 1)
		if c.Reconnects() != w.reconnects {
			// It waited across a reconnection: not one round trip.
			st.ackResent.RecordValue(us)
			break
		}
		st.ack.RecordValue(us)
		st.ackWin.RecordValue(us)
	case wire.AckRateLimited:
		st.limited++
	case wire.AckBusy:
		st.errors["busy"]++
	default:
		st.errors["refused"]++
	}
}

// onUpdate rebuilds the bot's view of the world from a state update
// (client.Config.OnUpdate: on the connection's reader), acknowledges each
// new tick, and measures applied latency and jitter. It applies every
// update it is given, as readers of Updates did.
func (b *bot) onUpdate(u wire.StateUpdate, st *stats) {
	now := time.Now()
	b.mu.Lock()
	if b.c == nil {
		b.mu.Unlock()
		return // before Dial returned: the server's first state comes again as a full one
	}
	if n := b.c.Reconnects(); n != b.reconnects {
		// A new connection (perhaps to a restarted server, whose ticks
		// may be behind ours) starts from a full state.
		b.reconnects, b.tr, b.last, b.resyncing = n, broadside.StateTracker{Pinned: true}, time.Time{}, true
		b.ackTick, b.lastAcked = 0, 0
		b.frame.Store(nil)
	}
	if b.resyncing && u.BaseTick != 0 {
		b.mu.Unlock()
		return // a delta of the lost connection
	}
	if l := b.tr.Latest(); l != nil && u.Tick <= l.Tick {
		b.mu.Unlock()
		return // an old update arriving late (its base may be gone): nothing to learn
	}
	f, err := b.tr.Apply(u.Tick, u.BaseTick, u.Payload)
	if err != nil {
		b.mu.Unlock()
		// An update against a base we no longer hold, or a broken one:
		// the next full update resynchronises.
		st.errDetail(StateErrorKind(err), err.Error())
		return
	}
	b.resyncing = false
	if f != b.tr.Latest() {
		b.mu.Unlock()
		return // an old update arriving late
	}
	b.frame.Store(f)
	var jitter int64 = -1
	if !b.last.IsZero() {
		jitter = max((now.Sub(b.last) - b.period).Abs().Microseconds(), 1)
	}
	b.last = now
	k := 0
	for k < len(b.queue) && b.queue[k].seq <= u.LastAppliedSeq {
		k++
	}
	st.mu.Lock()
	if st.running && !st.closed {
		st.updates++
		if jitter > 0 {
			st.jitter.RecordValue(jitter)
		}
		for _, c := range b.queue[:k] {
			us := max(now.Sub(c.at).Microseconds(), 1)
			st.app.RecordValue(us)
			st.appWin.RecordValue(us)
			st.applied++
		}
	}
	st.mu.Unlock()
	b.queue = append(b.queue[:0], b.queue[k:]...)
	b.ackTick = u.Tick
	b.mu.Unlock()
}

// stateAckEvery is how many ticks apart a bot acknowledges state (the
// client's default): the server bases its deltas on the newest
// acknowledged tick, so a bot's tracker keeps about 16 / 3 frames.
const stateAckEvery = 3

// turnSlack is how early a group's driver takes a bot's turn that is due
// soon after the one it woke for: the bots of a group then share wake-ups.
// Each bot keeps its own schedule (its rate does not change); a turn goes
// at most this much early.
const turnSlack = 2 * time.Millisecond

// playGroup joins the group's bots to the game, then takes each bot's
// turns at the configured rate (each bot on its own schedule, from a
// random phase) until ctx ends: one goroutine and one timer for the
// group.
func playGroup(ctx context.Context, cfg Config, group []*bot, st *stats) {
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	slack := min(turnSlack, interval/8)
	now := time.Now()
	for _, b := range group {
		b.next = now.Add(time.Duration(b.rng.Int64N(int64(interval) + 1)))
		b.send(broadside.ToGameCommand(broadside.Join()), st)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		earliest := group[0].next
		for _, b := range group[1:] {
			if b.next.Before(earliest) {
				earliest = b.next
			}
		}
		if wait := time.Until(earliest); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		now = time.Now()
		due := now.Add(slack)
		for _, b := range group {
			if !b.next.After(due) {
				b.turn(cfg, interval, now, st)
			}
		}
	}
}

// turn takes one of the bot's turns: it sends the command its behaviour
// gives unless its window is full (then it skips the turn), and schedules
// the next turn.
func (b *bot) turn(cfg Config, interval time.Duration, now time.Time, st *stats) {
	b.next = b.next.Add(interval)
	if late := now.Sub(b.next); late > 4*interval {
		// Behind schedule (a starved process): catch up by a few
		// commands at most, never with a burst of a second's worth
		// that a rate limit of twice the rate would refuse.
		b.next = now
	}
	b.mu.Lock()
	full := len(b.acks) >= cfg.Window
	var cmd wire.GameCommand
	if !full {
		cmd = b.decide(cfg.Behaviour, b.rng) // b.frame's memory is reused under b.mu (onUpdate)
	}
	ack := b.ackTick
	b.ackTick = 0
	if ack != 0 && (b.lastAcked == 0 || ack >= b.lastAcked+stateAckEvery) && b.tr.Pin(ack) {
		b.lastAcked = ack
	} else {
		ack = 0
	}
	b.mu.Unlock()
	if ack != 0 {
		// The client keeps it for the command sent next (or, with the
		// window full, sends it alone after StateAckDelay).
		b.c.AckState(ack)
	}
	if full {
		st.mu.Lock()
		st.skipped++
		st.mu.Unlock()
		return
	}
	b.send(cmd, st)
}

// decide returns the bot's next command.
func (b *bot) decide(behaviour string, rng *rand.Rand) wire.GameCommand {
	if behaviour == Captain {
		if f := b.frame.Load(); f != nil {
			if own, ok := f.Ship(b.player); ok {
				if c, ok := broadside.BotCommand(f.Ships, own, rng); ok {
					return broadside.ToGameCommand(c)
				}
				// Nothing to change: keep the rate with a small
				// throttle trim, as a player fiddling with the helm.
				return broadside.ToGameCommand(broadside.Throttle(int8(70 + rng.IntN(31))))
			}
		}
	}
	return randomCommand(rng)
}

// send sends cmd with the bot's next sequence number. The command waits
// for its verdict from before it is written, so that a verdict can never
// find it missing, and b.mu is not held while the client writes: the
// connection's readers, which take b.mu, never wait behind a write.
func (b *bot) send(cmd wire.GameCommand, st *stats) {
	b.mu.Lock()
	b.seq++
	cmd.Seq = b.seq
	now := time.Now()
	b.acks[cmd.Seq] = waiting{at: now, reconnects: b.c.Reconnects()}
	queued := len(b.queue) < 1<<16
	if queued {
		b.queue = append(b.queue, sentCmd{cmd.Seq, now})
	}
	b.mu.Unlock()
	if _, err := b.c.Send(cmd); err != nil {
		b.mu.Lock()
		delete(b.acks, cmd.Seq)
		if n := len(b.queue); queued && n > 0 && b.queue[n-1].seq == cmd.Seq {
			b.queue = b.queue[:n-1]
		}
		b.mu.Unlock()
		st.err("send")
		return
	}
	st.mu.Lock()
	st.sent++
	st.mu.Unlock()
}

// randomCommand steers and fires at random: throttle and rudder changes
// most of the time, a broadside now and then.
func randomCommand(rng *rand.Rand) wire.GameCommand {
	switch r := rng.IntN(10); {
	case r < 4:
		return wire.GameCommand{Kind: wire.CommandRudder, Value: int32(rng.IntN(201) - 100)}
	case r < 7:
		return wire.GameCommand{Kind: wire.CommandThrottle, Value: int32(rng.IntN(101))}
	default:
		side := int8(1)
		if rng.IntN(2) == 0 {
			side = -1
		}
		return wire.GameCommand{Kind: wire.CommandFire, Side: side}
	}
}

// ErrorKinds returns the error kinds of a report in a stable order.
func (r *Report) ErrorKinds() []string {
	var ks []string
	for k := range r.Errors {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
