// Package match is 'broadside demo': a whole Broadside match in one
// process — an embedded command log cluster, a game server whose world is
// split in sectors, bots playing from the state they receive — with faults
// injected mid-match (a sim shard killed, the sequencing leader crashed,
// then the whole server killed with no clean stop and reopened from disk)
// and checks at the end: every acknowledged command in the log exactly
// once, the whole log re-simulated from scratch to the live run's hashes
// across the kill, and a recording that verifies.
package match

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"golang.org/x/mod/sumdb/note"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Options configure a match.
type Options struct {
	Duration time.Duration
	Bots     int
	// Rate is the commands per second each bot sends.
	Rate float64
	Seed uint64
	// Dir is the working directory (default: a new temporary one whose
	// data is removed; the recording is kept).
	Dir string
	// Recording is where to write the recording (default: match.bsr in
	// Dir).
	Recording string
	// Signer, if set, signs the recording's log checkpoints (see
	// bsr.RecordConfig.Signer).
	Signer note.Signer
	// Durability is the embedded log's (see cmdlog/embedded).
	Durability seq.Durability
	NoFaults   bool
	// Out receives the match's narration (nil: none).
	Out io.Writer
}

// Report is the match's summary.
type Report struct {
	Players int    `json:"players"`
	Ticks   uint64 `json:"ticks"`
	Sent    int64  `json:"sent"`
	Acked   int64  `json:"acked"`
	// AckStatus says what the acknowledgements promised: "durable"
	// (fsynced on every sequencing replica) or "replicated".
	AckStatus  string `json:"ack_status"`
	Applied    int64  `json:"applied"`
	InLog      int    `json:"in_log"`
	Lost       int    `json:"lost"`
	Duplicated int    `json:"duplicated"`
	Recoveries int    `json:"recoveries"`
	// RecoveryMismatched counts replayed ticks whose hash differed from
	// the one published before the crash.
	RecoveryMismatched int       `json:"recovery_mismatched"`
	RecoveryMs         []float64 `json:"recovery_ms"`
	ViewChangeMs       float64   `json:"view_change_ms"`
	DeterminismOK      bool      `json:"determinism_ok"`
	TicksChecked       uint64    `json:"ticks_checked"`
	FirstDiverging     string    `json:"first_diverging,omitempty"`
	Recording          string    `json:"recording"`
	RecordingBytes     int64     `json:"recording_bytes"`
	AckP50ms           float64   `json:"ack_p50_ms"`
	AckP99ms           float64   `json:"ack_p99_ms"`
	AppliedP99ms       float64   `json:"applied_p99_ms"`
	DownBytesSec       float64   `json:"down_bytes_per_sec_per_client"`
	Sunk               uint64    `json:"ships_sunk"`
	BallsFired         uint64    `json:"balls_fired"`
	// ServerKill is what the kill of the whole server showed.
	ServerKill ServerKill `json:"server_kill"`
}

// ServerKill reports the kill of the whole server (log, game server and
// world, with no clean stop) and its reopening from the data directory.
type ServerKill struct {
	// Done is false when the kill was skipped; Skipped then says why.
	Done    bool   `json:"done"`
	Skipped string `json:"skipped,omitempty"`
	// TickBefore is the newest tick every sector had stepped when the
	// server died; FirstLiveTick the first tick the reopened server
	// appended and completed; TicksAfter the ticks completed after it.
	TickBefore    uint64 `json:"tick_before"`
	FirstLiveTick uint64 `json:"first_live_tick"`
	TicksAfter    uint64 `json:"ticks_after"`
	// AckedBefore counts the commands acknowledged durable before the
	// kill (each is checked to be in the log exactly once).
	AckedBefore int `json:"acked_before"`
	// TeardownMs is how long the in-process kill took (closing what a
	// crashed process's kernel would): not part of the restart.
	TeardownMs float64 `json:"teardown_ms"`
	// From the start of the reopening (a new process's start): the log
	// open, the first tick completed by the reopened world, and the first
	// command acknowledged durable to a reconnected bot.
	LogOpenMs float64 `json:"log_open_ms"`
	// LogReadyMs is when the reopened log first answered a tail check
	// (its replicas recovered from their write-ahead logs and agreed on a
	// view).
	LogReadyMs  float64 `json:"log_ready_ms"`
	FirstTickMs float64 `json:"first_tick_ms"`
	FirstAckMs  float64 `json:"first_ack_ms"`
	// ReplayChecked counts tick hashes that the reopened sectors replayed
	// from their snapshots and the log and that were compared with the
	// hashes the killed server had published; ReplayMismatched those that
	// differed.
	ReplayChecked    uint64 `json:"replay_checked"`
	ReplayMismatched uint64 `json:"replay_mismatched"`
	// Reconnects counts the bots' sessions resumed on the reopened server
	// (every bot reconnects by itself); Resent the commands they sent
	// again because the killed server had not acknowledged them (the log
	// stores each once).
	Reconnects int64 `json:"reconnects"`
	Resent     int64 `json:"resent"`
}

// victim is the sim shard the match kills.
const victim = 1

// match is one running match.
type match struct {
	o      Options
	start  time.Time
	game   world.Game
	conf   broadside.Config
	log    *embedded.Cluster
	ca     *transport.DevCA
	secret []byte
	// addr is the game server's address, kept across the restart.
	addr  string
	srv   *server.Server
	world *world.World
	// worldStopped is set once world stopped (its hashes stay readable).
	worldStopped bool
	// killed is the world the server kill abandoned (nil: none); its
	// hashes cover the match up to the kill.
	killed *world.World
	// resumeTail is the log's tail when the reopened log first answered:
	// the bots' first run's commands are at or below it, the second's
	// above.
	resumeTail uint64
	// watchTick, if set, sees every tick the world publishes.
	watchTick func(w *world.World, tick uint64)
	rec       *world.Recording
	recovered chan replay.Recovery
	served    chan error
	stopServe context.CancelFunc

	ackMu sync.Mutex
	acked map[[2]uint64]bool // (player, client sequence)
	// firstAck is closed at the first acknowledgement of the bots'
	// second run.
	firstAck     chan struct{}
	firstAckOnce sync.Once
	// reopened is set once the server was reopened after its kill.
	reopened atomic.Bool
}

func (m *match) say(format string, a ...any) {
	if m.o.Out != nil {
		fmt.Fprintf(m.o.Out, format, a...)
	}
}

func (m *match) at() string { return fmt.Sprintf("t=%5.1fs", time.Since(m.start).Seconds()) }

// Run plays a match and checks it. The error says what failed a check.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	if o.Bots <= 0 || o.Duration < 3*time.Second || o.Rate <= 0 {
		return rep, fmt.Errorf("need bots > 0, rate > 0 and a duration of at least 3s")
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "broadside-demo-"); err != nil {
			return rep, err
		}
		defer os.RemoveAll(filepath.Join(o.Dir, "data"))
	}
	if o.Recording == "" {
		o.Recording = filepath.Join(o.Dir, "match.bsr")
	}
	m := &match{o: o, start: time.Now(), acked: map[[2]uint64]bool{}, recovered: make(chan replay.Recovery, 16), firstAck: make(chan struct{})}
	m.conf = broadside.Config{Seed: o.Seed, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 2, Islands: 8}
	if m.game, err = broadside.NewGame(m.conf, 0); err != nil {
		return rep, err
	}
	m.say("Broadside demo: %d bots, %s match on a %d m sea in %d sectors (sim shards), seed %d\n",
		o.Bots, o.Duration, m.conf.Width, m.game.Shards, o.Seed)
	defer m.close()
	if err := m.startServer(ctx); err != nil {
		return rep, err
	}
	botRep, err := m.play(ctx, &rep)
	if err != nil {
		return rep, err
	}
	final, err := m.stop(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if err := m.check(ctx, final, &rep); err != nil {
		return rep, err
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	size, err := m.rec.Finish(rctx, final)
	rcancel()
	if err != nil {
		return rep, fmt.Errorf("recording: %w", err)
	}
	rep.Recording, rep.RecordingBytes = o.Recording, size
	m.say("%s recording written: %s (%d KiB)\n", m.at(), o.Recording, size/1024)
	rep.Players, rep.Ticks = botRep.Bots, final
	rep.Sent, rep.Acked, rep.Applied, rep.AckStatus = botRep.Sent, botRep.Acked, botRep.Applied, botRep.AckStatus
	rep.AckP50ms, rep.AckP99ms = usMs(botRep.AckP50us), usMs(botRep.AckP99us)
	rep.AppliedP99ms = usMs(botRep.AppliedP99us)
	rep.DownBytesSec = botRep.DownBytesPerSec
	if k := &rep.ServerKill; k.Done && final >= k.FirstLiveTick {
		k.TicksAfter = final - k.FirstLiveTick + 1
	}
	m.summary(rep)
	return rep, verdict(rep)
}

func usMs(us int64) float64 { return float64(us) / 1000 }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// startServer creates the match's CA and token secret, then starts the
// log, the game server, the world and the recording.
func (m *match) startServer(ctx context.Context) error {
	var err error
	if m.ca, err = transport.NewDevCA(); err != nil {
		return err
	}
	m.secret = make([]byte, 32)
	rand.Read(m.secret)
	if err := m.startLog(ctx); err != nil {
		return err
	}
	v0, _, err := m.log.Coordinator().Get(ctx)
	if err != nil {
		return err
	}
	m.say("%s command log: %d sequencing replicas (leader %d), %d shards on loopback QUIC, %s durability\n", m.at(), len(v0.Members), v0.Leader,
		len(m.log.Local().Layout().Shards), durabilityName(m.o.Durability))
	if err := m.startGame(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	m.say("%s game server on %s (QUIC, ALPN %s); world ticking at %d Hz; recording to %s\n", m.at(), m.srv.Addr(), wire.ALPN, broadside.TickRate, m.o.Recording)
	return nil
}

func durabilityName(d seq.Durability) string {
	if d == seq.Fsync {
		return "fsync"
	}
	return "memory"
}

// startLog starts (or reopens) the embedded log on the match's data
// directory.
func (m *match) startLog(ctx context.Context) error {
	var err error
	m.log, err = embedded.Start(ctx, embedded.Options{Dir: filepath.Join(m.o.Dir, "data", "log"), Durability: m.o.Durability})
	return err
}

// startGame starts (or reopens) the game server on addr, the world on the
// match's data directory and the recording.
func (m *match) startGame(ctx context.Context, addr string) error {
	errLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	reg := prometheus.NewRegistry()
	stls, err := m.ca.ServerTLS("localhost")
	if err != nil {
		return err
	}
	frames := world.NewFrames(m.game.Shards, m.game.NewFrame)
	srv, err := server.New(server.Config{
		ListenAddr: addr, TLS: stls, Secret: m.secret, Log: m.log.Log(), Durability: server.DurabilityOf(m.o.Durability),
		Limits: server.IntakeLimits{Rate: rate.Limit(max(2*m.o.Rate, 60)), Burst: 60}, Logger: errLog, Registry: reg,
		State: broadside.NewStateSource(frames), SpectatorDelay: 2 * broadside.TickRate, TickRate: broadside.TickRate,
		Tick: frames.Latest, World: m.game.Config,
	})
	if err != nil {
		return err
	}
	m.srv, m.addr = srv, srv.Addr()
	frames.OnApplied(srv.NoteApplied)
	var running atomic.Pointer[world.World]
	watch := m.watchTick
	w, err := world.Start(ctx, world.Config{
		Game: m.game, Dir: filepath.Join(m.o.Dir, "data", "world"), Log: m.log.World(), Frames: frames,
		OnFrame: func(tick uint64) {
			srv.Publish(tick)
			if w := running.Load(); w != nil && watch != nil {
				watch(w, tick)
			}
		},
		HistoryTicks: int(m.o.Duration.Seconds()+60) * broadside.TickRate, Logger: errLog, Registry: reg,
		// At most one capture a second, so that a recovery has log to
		// replay (the default policy, tuned for a 200 ms recovery target,
		// snapshots this small world nearly every tick).
		MinSnapshotInterval: broadside.TickRate,
		OnRecovery: func(r replay.Recovery) {
			select {
			case m.recovered <- r:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	running.Store(w)
	m.world, m.worldStopped = w, false
	m.rec = world.StartRecording(ctx, m.o.Recording, m.game, world.DefaultID, m.log.World(), bsr.RecordConfig{Logger: errLog, Signer: m.o.Signer})
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	m.stopServe, m.served = stopServe, make(chan error, 1)
	go func() { m.served <- srv.Serve(serveCtx) }()
	return nil
}

// close releases whatever is still running.
func (m *match) close() {
	if m.rec != nil {
		m.rec.Stop()
	}
	if m.stopServe != nil {
		m.stopServe()
		<-m.served
	}
	if m.world != nil && !m.worldStopped {
		m.world.Stop(context.Background())
	}
	if m.log != nil {
		m.log.Close()
	}
}

// botRun is one run of the bots.
type botRun struct {
	rep    bots.Report
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// startBots starts the bots for d: they reconnect by themselves when the
// server dies and comes back, resume their sessions and resend what was
// not acknowledged.
func (m *match) startBots(ctx context.Context, d time.Duration) *botRun {
	bctx, cancel := context.WithCancel(ctx)
	r := &botRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.rep, r.err = bots.Run(bctx, bots.Config{
			Server: m.addr, TLS: m.ca.ClientTLS(), Secret: m.secret, N: m.o.Bots, Rate: m.o.Rate, Duration: d,
			Behaviour: bots.Captain, Seed: m.o.Seed, ReconnectAttempts: 40,
			OnAck: func(player uint32, seq uint64, _ wire.AckStatus) {
				m.ackMu.Lock()
				m.acked[[2]uint64{uint64(player), seq}] = true
				m.ackMu.Unlock()
				if m.reopened.Load() {
					m.firstAckOnce.Do(func() { close(m.firstAck) })
				}
			},
		})
	}()
	return r
}

// play runs the bots and the faults until the match is over: a sim shard
// killed, the sequencing leader crashed and restarted, then the whole
// server killed and reopened from disk (in fsync durability) with the
// bots' run started again against it.
func (m *match) play(ctx context.Context, rep *Report) (bots.Report, error) {
	killAt := m.o.Duration * 2 / 3
	switch {
	case m.o.NoFaults:
		rep.ServerKill.Skipped = "--no-faults"
	case m.o.Durability != seq.Fsync:
		rep.ServerKill.Skipped = "memory durability: the sequencing replicas' state dies with the process, so its data cannot resume (--durability fsync, the default, can)"
	}
	run1 := m.startBots(ctx, m.o.Duration)
	m.say("%s %d bots connecting, each sending %.0f commands/s\n", m.at(), m.o.Bots, m.o.Rate)
	if !m.o.NoFaults {
		if err := m.faults(ctx, rep); err != nil {
			run1.cancel()
			<-run1.done
			return run1.rep, err
		}
	}
	if rep.ServerKill.Skipped != "" {
		if !m.o.NoFaults {
			m.say("%s not killing the whole server: %s\n", m.at(), rep.ServerKill.Skipped)
		}
		<-run1.done
		if run1.err != nil {
			return run1.rep, fmt.Errorf("bots: %w", run1.err)
		}
		m.say("%s match over: %d commands sent, %d acknowledged %s, %d seen applied in state updates\n",
			m.at(), run1.rep.Sent, run1.rep.Acked, run1.rep.AckStatus, run1.rep.Applied)
		return run1.rep, nil
	}
	sleepCtx(ctx, time.Until(m.start.Add(killAt)))
	m.killServer(rep)
	if err := m.reopen(ctx, rep); err != nil {
		run1.cancel()
		<-run1.done
		return run1.rep, err
	}
	<-run1.done
	if run1.err != nil {
		return run1.rep, fmt.Errorf("bots: %w", run1.err)
	}
	rep.ServerKill.Reconnects, rep.ServerKill.Resent = run1.rep.Reconnects, run1.rep.Resent
	m.say("%s match over: %d commands sent, %d acknowledged %s, %d seen applied in state updates; %d sessions resumed after the kill, %d commands resent\n",
		m.at(), run1.rep.Sent, run1.rep.Acked, run1.rep.AckStatus, run1.rep.Applied, run1.rep.Reconnects, run1.rep.Resent)
	return run1.rep, nil
}

// faults kills a sim shard at a quarter of the match, and crashes the
// sequencing leader at three eighths and restarts it at half.
func (m *match) faults(ctx context.Context, rep *Report) error {
	sleepCtx(ctx, m.o.Duration/4+time.Duration(m.o.Seed%20)*(time.Second/40))
	m.say("%s killing sim shard %d (sector %d) at tick %d; the other sectors keep running\n", m.at(), victim, victim, m.world.Tick())
	m.world.Kill(victim)
	select {
	case r := <-m.recovered:
		m.say("%s sector %d recovered in %.1f ms: snapshot of tick %d, %d ticks replayed from the log, %d hashes re-checked, %d mismatched\n",
			m.at(), r.Shard, float64(r.Duration.Microseconds())/1000, r.From.Tick, r.Replayed, r.Checked, r.Mismatched)
	case <-time.After(10 * time.Second):
		m.say("%s sector %d did not recover within 10 s\n", m.at(), victim)
	}
	sleepCtx(ctx, time.Until(m.start.Add(m.o.Duration*3/8)))
	co := m.log.Coordinator()
	v, _, err := co.Get(ctx)
	if err != nil {
		return err
	}
	m.say("%s crashing sequencing leader %d (view %d); it loses its memory\n", m.at(), v.Leader, v.Number)
	crashed := time.Now()
	m.log.Local().StopNode(v.Leader)
	for time.Since(crashed) < 10*time.Second {
		nv, _, err := co.Get(ctx)
		if err == nil && nv.Active() && nv.Number > v.Number {
			rep.ViewChangeMs = float64(time.Since(crashed).Microseconds()) / 1000
			m.say("%s view %d active after %.0f ms: members %v, leader %d\n", m.at(), nv.Number, rep.ViewChangeMs, nv.Members, nv.Leader)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	sleepCtx(ctx, time.Until(m.start.Add(m.o.Duration/2)))
	m.say("%s restarting replica %d\n", m.at(), v.Leader)
	m.log.Local().StartNode(v.Leader)
	return nil
}

// killServer kills the whole server as a crash would: the world stops
// where it is (no final snapshot, lineage not flushed, its stores closed
// with what they had synced), the log's nodes stop (the replicas' memory
// is lost, their fsynced write-ahead logs stay), the game server's
// endpoint closes every connection, the recording stops. The world goes
// first so that its runners do not see the log die and start recoveries
// a crashed process would never run. The bots lose their connections and
// keep trying to reconnect.
func (m *match) killServer(rep *Report) {
	k := &rep.ServerKill
	m.say("%s KILLING THE WHOLE SERVER at tick %d: log nodes, game server and world stop at once, no drain, no final snapshot\n", m.at(), m.world.Tick())
	t0 := time.Now()
	k.TickBefore = m.world.Abandon()
	m.killed, m.world = m.world, nil
	m.log.Kill()
	m.log = nil
	m.stopServe()
	<-m.served
	m.stopServe = nil
	m.rec.Stop()
	m.rec = nil
	k.TeardownMs = ms(time.Since(t0))
	m.ackMu.Lock()
	k.AckedBefore = len(m.acked)
	m.ackMu.Unlock()
	m.say("%s server dead (teardown %.0f ms in this process): %d commands had been acknowledged durable, the newest complete tick was %d\n",
		m.at(), k.TeardownMs, k.AckedBefore, k.TickBefore)
}

// reopen restarts the log, the game server (same address) and the world
// from the data directory, as a new process would, and waits for the first
// live tick and the first acknowledgement to a reconnected bot.
func (m *match) reopen(ctx context.Context, rep *Report) error {
	k := &rep.ServerKill
	m.say("%s reopening from %s\n", m.at(), filepath.Join(m.o.Dir, "data"))
	t0 := time.Now()
	if err := m.startLog(ctx); err != nil {
		return fmt.Errorf("reopen the log: %w", err)
	}
	k.LogOpenMs = ms(time.Since(t0))
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tail, err := m.log.Log().CheckTail(tctx)
	if err != nil {
		return fmt.Errorf("reopened log: tail: %w", err)
	}
	m.resumeTail, k.LogReadyMs = tail, ms(time.Since(t0))
	// The first live tick is the first complete tick whose marker the
	// reopened world appended (above the tail the reopened log had).
	live := make(chan uint64, 1)
	m.watchTick = func(w *world.World, tick uint64) {
		if th, ok := w.Hashes(0).Get(tick); ok && th.Pos > tail {
			select {
			case live <- tick:
			default:
			}
		}
	}
	m.reopened.Store(true)
	if err := m.startGame(ctx, m.addr); err != nil {
		return fmt.Errorf("reopen the game server and the world: %w", err)
	}
	var liveAt, ackAt time.Duration
	firstAck := m.firstAck
	for liveAt == 0 || ackAt == 0 {
		select {
		case tick := <-live:
			liveAt, k.FirstLiveTick, live = time.Since(t0), tick, nil
		case <-firstAck:
			ackAt, firstAck = time.Since(t0), nil
		case <-tctx.Done():
			return fmt.Errorf("reopened server: no live tick or no acknowledgement within 30 s (live after %v, ack after %v)", liveAt, ackAt)
		}
	}
	k.Done, k.FirstTickMs, k.FirstAckMs = true, ms(liveAt), ms(ackAt)
	m.say("%s server back on %s: log open in %.0f ms and answering after %.0f ms, first live tick %d after %.0f ms, first command acknowledged durable after %.0f ms\n",
		m.at(), m.addr, k.LogOpenMs, k.LogReadyMs, k.FirstLiveTick, k.FirstTickMs, k.FirstAckMs)
	m.say("%s the bots reconnected by themselves and resumed their sessions; the recording restarts from the log's start\n", m.at())
	return nil
}

// stop drains the server and stops the world with final snapshots.
func (m *match) stop(ctx context.Context, rep *Report) (uint64, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.srv.Drain(dctx); err != nil {
		return 0, err
	}
	final, err := m.world.Stop(dctx)
	m.worldStopped = true
	if err != nil {
		return 0, err
	}
	m.say("%s server drained; final snapshots of every sector at tick %d\n", m.at(), final)
	var recs []replay.Recovery
	if m.killed != nil {
		recs = m.killed.Recoveries()
	}
	for _, r := range append(recs, m.world.Recoveries()...) {
		rep.Recoveries++
		rep.RecoveryMs = append(rep.RecoveryMs, float64(r.Duration.Microseconds())/1000)
		rep.RecoveryMismatched += int(r.Mismatched)
	}
	return final, nil
}

// liveHash returns the hash the live server published for shard's tick:
// the reopened world's, or the killed world's for the ticks before.
func (m *match) liveHash(shard uint32, tick uint64) (replay.TickHash, bool) {
	if th, ok := m.world.Hashes(shard).Get(tick); ok {
		return th, true
	}
	if m.killed != nil {
		return m.killed.Hashes(shard).Get(tick)
	}
	return replay.TickHash{}, false
}

// checkReplay compares the hashes of the ticks that the reopened world's
// sectors replayed from their snapshots with those the killed world had
// published.
func (m *match) checkReplay(k *ServerKill) {
	if m.killed == nil {
		return
	}
	for shard := range uint32(m.game.Shards) {
		for t := uint64(1); t <= k.TickBefore; t++ {
			a, ok1 := m.killed.Hashes(shard).Get(t)
			b, ok2 := m.world.Hashes(shard).Get(t)
			if !ok1 || !ok2 {
				continue
			}
			k.ReplayChecked++
			if a.Hash != b.Hash {
				k.ReplayMismatched++
			}
		}
	}
}

// check reads the whole log back (every acknowledged command exactly
// once) and re-simulates it from scratch, comparing every tick's hash with
// the live run's.
func (m *match) check(ctx context.Context, final uint64, rep *Report) error {
	entries, err := ReadWholeLog(ctx, m.log.Log())
	if err != nil {
		return err
	}
	seen := map[[2]uint64]int{}
	for _, e := range entries {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopePlayerCommand {
			continue
		}
		seen[[2]uint64{uint64(env.Player), env.ClientSeq}]++
	}
	m.ackMu.Lock()
	for k := range m.acked {
		switch n := seen[k]; {
		case n == 0:
			rep.Lost++
		case n > 1:
			rep.Duplicated++
		}
	}
	m.ackMu.Unlock()
	rep.InLog = len(seen)
	m.say("%s log read back: %d entries; every acknowledged command checked: %d lost, %d duplicated\n", m.at(), len(entries), rep.Lost, rep.Duplicated)

	m.say("%s re-simulating the whole log from scratch (%d sectors x %d ticks) and comparing every tick's hash\n", m.at(), m.game.Shards, final)
	hashes, sims, err := world.Resimulate(ctx, m.game, world.DefaultID, entries, final, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	rep.TicksChecked, rep.FirstDiverging = compareHashes(hashes, m.liveHash, final)
	m.checkReplay(&rep.ServerKill)
	rep.DeterminismOK = rep.FirstDiverging == "" && rep.TicksChecked == final*uint64(m.game.Shards) && final > 0
	for _, s := range sims {
		st := s.(*broadside.Sector).Stats()
		rep.Sunk += st.Sunk
		rep.BallsFired += st.BallsFired
	}
	if rep.DeterminismOK {
		m.say("%s determinism verified: %d tick hashes identical to the live run\n", m.at(), rep.TicksChecked)
	} else {
		m.say("%s DETERMINISM FAILED: %d ticks checked; %s\n", m.at(), rep.TicksChecked, rep.FirstDiverging)
	}
	return nil
}

// compareHashes compares every shard's re-simulated hashes of ticks
// 1..final with the live run's, and returns how many matched and the first
// divergence ("" if none).
func compareHashes(resim []*replay.HashHistory, live func(shard uint32, tick uint64) (replay.TickHash, bool), final uint64) (uint64, string) {
	var matched, firstTick uint64
	var firstDiv string
	for i, hist := range resim {
		for t := uint64(1); t <= final; t++ {
			g, ok1 := hist.Get(t)
			w, ok2 := live(uint32(i), t)
			var div string
			switch {
			case !ok1 || !ok2:
				div = fmt.Sprintf("sector %d tick %d: hash missing (re-simulated %v, live %v)", i, t, ok1, ok2)
			case g.Hash != w.Hash:
				div = fmt.Sprintf("sector %d tick %d: re-simulated %016x, live %016x", i, t, g.Hash, w.Hash)
			default:
				matched++
				continue
			}
			if firstDiv == "" || t < firstTick {
				firstDiv, firstTick = div, t
			}
		}
	}
	return matched, firstDiv
}

func (m *match) summary(rep Report) {
	m.say("\nsummary\n")
	m.say("  players        %d bots (captain behaviour), %d ticks (%.1f s at %d Hz)\n", rep.Players, rep.Ticks, float64(rep.Ticks)/broadside.TickRate, broadside.TickRate)
	m.say("  commands       %d acknowledged %s (p50 %.2f ms, p99 %.2f ms), %d seen applied (p99 %.0f ms)\n",
		rep.Acked, rep.AckStatus, rep.AckP50ms, rep.AckP99ms, rep.Applied, rep.AppliedP99ms)
	m.say("  lost           %d (of %d acknowledged; %d duplicated)\n", rep.Lost, rep.Acked, rep.Duplicated)
	m.say("  battle         %d cannonballs fired, %d ships sunk\n", rep.BallsFired, rep.Sunk)
	if rep.Recoveries > 0 {
		m.say("  recoveries     %d, took %v ms\n", rep.Recoveries, rep.RecoveryMs)
	} else {
		m.say("  recoveries     0\n")
	}
	if rep.ViewChangeMs > 0 {
		m.say("  view change    %.0f ms after the leader crashed\n", rep.ViewChangeMs)
	}
	if k := rep.ServerKill; k.Done {
		m.say("  server kill    the whole server killed at tick %d with no clean stop, reopened from disk:\n", k.TickBefore)
		m.say("                 restart: first live tick %d after %.0f ms, first command acknowledged after %.0f ms (log open %.0f ms, answering %.0f ms)\n",
			k.FirstLiveTick, k.FirstTickMs, k.FirstAckMs, k.LogOpenMs, k.LogReadyMs)
		m.say("                 survived: all %d commands acknowledged before the kill, %d lost; %d ticks before, %d after\n",
			k.AckedBefore, rep.Lost, k.TickBefore, k.TicksAfter)
		m.say("                 hashes continued: %d replayed tick hashes equal to the killed server's (%d differ)\n",
			k.ReplayChecked, k.ReplayMismatched)
		m.say("                 players: %d sessions resumed on the reopened server, %d unacknowledged commands resent, each stored once\n",
			k.Reconnects, k.Resent)
	} else if k.Skipped != "" {
		m.say("  server kill    skipped: %s\n", k.Skipped)
	}
	m.say("  determinism    %v (%d tick hashes re-simulated from the log)\n", rep.DeterminismOK, rep.TicksChecked)
	m.say("  state          %.0f B/s down per client\n", rep.DownBytesSec)
	m.say("  recording      %s (%d KiB)\n", rep.Recording, rep.RecordingBytes/1024)
	m.say("                 broadside replay info %s\n", rep.Recording)
	m.say("                 broadside replay verify %s\n", rep.Recording)
	m.say("                 broadside-viewer %s\n", rep.Recording)
}

// verdict is the error of a report that failed a check.
func verdict(rep Report) error {
	switch {
	case rep.Lost > 0:
		return fmt.Errorf("%d acknowledged commands are missing from the log", rep.Lost)
	case rep.Duplicated > 0:
		return fmt.Errorf("%d acknowledged commands are in the log more than once", rep.Duplicated)
	case rep.ServerKill.ReplayMismatched > 0:
		return fmt.Errorf("the reopened server replayed %d ticks to hashes other than the killed server's", rep.ServerKill.ReplayMismatched)
	case rep.RecoveryMismatched > 0:
		return fmt.Errorf("a recovered sector replayed %d ticks to hashes other than the live run's", rep.RecoveryMismatched)
	case !rep.DeterminismOK:
		return errors.New("the re-simulation diverged from the live run")
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// ReadWholeLog reads the log from position 1 to its tail.
func ReadWholeLog(ctx context.Context, l replay.TickLog) ([]msg.Entry, error) {
	tail, err := l.CheckTail(ctx)
	if err != nil {
		return nil, fmt.Errorf("check tail: %w", err)
	}
	entries := make([]msg.Entry, 0, tail)
	for pos := uint64(1); pos <= tail; {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		batch, err := l.Read(rctx, pos, 4096)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read from %d: %w", pos, err)
		}
		if len(batch) == 0 {
			return nil, fmt.Errorf("read from %d: no entries below the tail %d", pos, tail)
		}
		entries = append(entries, batch...)
		pos = batch[len(batch)-1].Pos + 1
	}
	return entries, nil
}
