package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// matchOptions are the flags of 'broadside demo'.
type matchOptions struct {
	duration  time.Duration
	bots      int
	rate      float64
	seed      uint64
	jsonFile  string
	dir       string
	recording string
	fsync     bool
	noFaults  bool
	quiet     bool
}

// matchReport is the demo's summary (--json).
type matchReport struct {
	Players    int    `json:"players"`
	Ticks      uint64 `json:"ticks"`
	Sent       int64  `json:"sent"`
	Acked      int64  `json:"acked"`
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
}

// runMatchDemo is 'broadside demo': an embedded command log, a game server
// with a sectored world, bots playing a match; a sim shard killed and
// recovered and a sequencing replica crashed mid-match; then the whole log
// re-simulated from scratch and checked tick by tick, and a recording.
func runMatchDemo(ctx context.Context, out io.Writer, o matchOptions) (rep matchReport, err error) {
	say := func(format string, a ...any) {
		if !o.quiet {
			fmt.Fprintf(out, format, a...)
		}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "broadside-demo-"); err != nil {
			return rep, err
		}
		defer os.RemoveAll(filepath.Join(dir, "data"))
	}
	if o.recording == "" {
		o.recording = filepath.Join(dir, "match.bsr")
	}
	errLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	reg := prometheus.NewRegistry()
	game := broadside.Config{Seed: o.seed, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 2, Islands: 8}
	start := time.Now()
	at := func() string { return fmt.Sprintf("t=%5.1fs", time.Since(start).Seconds()) }

	say("Broadside demo: %d bots, %s match on a %d m sea in %d sectors (sim shards), seed %d\n",
		o.bots, o.duration, game.Width, game.Sectors(), o.seed)
	el, err := startEmbeddedLog(ctx, filepath.Join(dir, "data", "log"), o.fsync, nil)
	if err != nil {
		return rep, err
	}
	defer el.Close()
	v0, _, err := el.coord.Get(ctx)
	if err != nil {
		return rep, err
	}
	say("%s command log: %d sequencing replicas (leader %d), %d shards on loopback QUIC\n", at(), len(v0.Members), v0.Leader, len(el.lc.Layout().Shards))

	ca, err := transport.NewDevCA()
	if err != nil {
		return rep, err
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		return rep, err
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	hub := newFrameHub(game.Sectors(), 0)
	worldInfo, err := game.MarshalBinary()
	if err != nil {
		return rep, err
	}
	srv, err := server.New(server.Config{
		ListenAddr: "127.0.0.1:0", TLS: stls, Secret: secret, Log: el.client,
		Limits: server.IntakeLimits{Rate: rate.Limit(max(2*o.rate, 60)), Burst: 60}, Logger: errLog, Registry: reg,
		State: hub, SpectatorDelay: 2 * broadside.TickRate, TickRate: broadside.TickRate, Tick: hub.latest, World: worldInfo,
	})
	if err != nil {
		return rep, err
	}
	recovered := make(chan replay.Recovery, 16)
	world, err := startGameWorld(ctx, gameWorldConfig{
		Game: game, Dir: filepath.Join(dir, "data", "world"), Log: el.world, Server: srv, Hub: hub,
		HistoryTicks: int(o.duration.Seconds()+60) * broadside.TickRate, Logger: errLog, Registry: reg,
		// At most one capture a second, so that a recovery has log to
		// replay (the default policy, tuned for a 200 ms recovery target,
		// snapshots this small world nearly every tick).
		MinSnapshotInterval: broadside.TickRate,
		OnRecovery: func(r replay.Recovery) {
			select {
			case recovered <- r:
			default:
			}
		},
	})
	if err != nil {
		return rep, err
	}
	worldStopped := false
	defer func() {
		if !worldStopped {
			world.Stop(context.Background())
		}
	}()
	rec := startLiveRecording(ctx, o.recording, game, defaultWorldID, el.world)
	defer func() {
		rec.cancel()
		<-rec.done
	}()
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	defer func() {
		stopServe()
		<-served
	}()
	say("%s game server on %s (QUIC, ALPN %s); world ticking at %d Hz; recording to %s\n", at(), srv.Addr(), wire.ALPN, broadside.TickRate, o.recording)

	// The bots, and the acknowledged commands they saw.
	var ackMu sync.Mutex
	acked := map[[2]uint64]bool{}
	botsDone := make(chan struct{})
	var botRep bots.Report
	var botErr error
	go func() {
		defer close(botsDone)
		botRep, botErr = bots.Run(ctx, bots.Config{
			Server: srv.Addr(), TLS: ca.ClientTLS(), Secret: secret, N: o.bots, Rate: o.rate, Duration: o.duration,
			Behaviour: bots.Captain, Seed: o.seed,
			OnDurable: func(player uint32, seq uint64) {
				ackMu.Lock()
				acked[[2]uint64{uint64(player), seq}] = true
				ackMu.Unlock()
			},
		})
	}()
	say("%s %d bots connecting, each sending %.0f commands/s\n", at(), o.bots, o.rate)

	// Faults: a sim shard killed at a third of the match, the sequencing
	// leader crashed at a half and restarted at three quarters.
	if !o.noFaults {
		sleepCtx(ctx, o.duration/3+time.Duration(o.seed%20)*(time.Second/40))
		const victim = 1
		say("%s killing sim shard %d (sector %d) at tick %d; the other sectors keep running\n", at(), victim, victim, world.Tick())
		world.sup.Kill(victim)
		select {
		case r := <-recovered:
			say("%s sector %d recovered in %.1f ms: snapshot of tick %d, %d ticks replayed from the log, %d hashes re-checked, %d mismatched\n",
				at(), r.Shard, float64(r.Duration.Microseconds())/1000, r.From.Tick, r.Replayed, r.Checked, r.Mismatched)
		case <-time.After(10 * time.Second):
			say("%s sector %d did not recover within 10 s\n", at(), victim)
		}
		sleepCtx(ctx, time.Until(start.Add(o.duration/2)))
		v, _, err := el.coord.Get(ctx)
		if err != nil {
			return rep, err
		}
		say("%s crashing sequencing leader %d (view %d); it loses its memory\n", at(), v.Leader, v.Number)
		crashed := time.Now()
		el.lc.StopNode(v.Leader)
		for time.Since(crashed) < 10*time.Second {
			nv, _, err := el.coord.Get(ctx)
			if err == nil && nv.Active() && nv.Number > v.Number {
				rep.ViewChangeMs = float64(time.Since(crashed).Microseconds()) / 1000
				say("%s view %d active after %.0f ms: members %v, leader %d\n", at(), nv.Number, rep.ViewChangeMs, nv.Members, nv.Leader)
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		sleepCtx(ctx, time.Until(start.Add(o.duration*3/4)))
		say("%s restarting replica %d\n", at(), v.Leader)
		el.lc.StartNode(v.Leader)
	}
	<-botsDone
	if botErr != nil {
		return rep, fmt.Errorf("bots: %w", botErr)
	}
	say("%s match over: %d commands sent, %d acknowledged durable, %d seen applied in state updates\n",
		at(), botRep.Sent, botRep.Durable, botRep.Applied)

	// Graceful stop: drain intake, final snapshots.
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := srv.Drain(dctx); err != nil {
		return rep, err
	}
	final, err := world.Stop(dctx)
	worldStopped = true
	if err != nil {
		return rep, err
	}
	say("%s server drained; final snapshots of every sector at tick %d\n", at(), final)
	for _, r := range world.Recoveries() {
		rep.Recoveries++
		rep.RecoveryMs = append(rep.RecoveryMs, float64(r.Duration.Microseconds())/1000)
		rep.RecoveryMismatched += int(r.Mismatched)
	}

	// Read the whole log back.
	entries, err := readWholeLog(ctx, el.client)
	if err != nil {
		return rep, err
	}
	seen := map[[2]uint64]int{}
	for _, e := range entries {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopePlayerCommand {
			continue
		}
		seen[[2]uint64{uint64(env.Player), env.ClientSeq}]++
	}
	ackMu.Lock()
	for k := range acked {
		switch n := seen[k]; {
		case n == 0:
			rep.Lost++
		case n > 1:
			rep.Duplicated++
		}
	}
	ackMu.Unlock()
	rep.InLog = len(seen)
	say("%s log read back: %d entries; every acknowledged command checked: %d lost, %d duplicated\n", at(), len(entries), rep.Lost, rep.Duplicated)

	// Re-simulate the whole log from scratch and compare every tick.
	say("%s re-simulating the whole log from scratch (%d sectors x %d ticks) and comparing every tick's hash\n", at(), game.Sectors(), final)
	checked, div, stats, err := resimulate(ctx, game, entries, final, world.sup.Hashes)
	if err != nil {
		return rep, err
	}
	rep.TicksChecked = checked
	rep.DeterminismOK = div == "" && checked == final*uint64(game.Sectors()) && final > 0
	rep.FirstDiverging = div
	rep.Sunk, rep.BallsFired = stats.Sunk, stats.BallsFired
	if rep.DeterminismOK {
		say("%s determinism verified: %d tick hashes identical to the live run\n", at(), checked)
	} else {
		say("%s DETERMINISM FAILED: %d ticks checked; %s\n", at(), checked, div)
	}

	// The recording, written while the match ran: wait for its last tick.
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	size, err := rec.finish(rctx, final)
	rcancel()
	if err != nil {
		return rep, fmt.Errorf("recording: %w", err)
	}
	rep.Recording, rep.RecordingBytes = o.recording, size
	say("%s recording written: %s (%d KiB)\n", at(), o.recording, size/1024)

	rep.Players = botRep.Bots
	rep.Ticks = final
	rep.Sent, rep.Acked, rep.Applied = botRep.Sent, botRep.Durable, botRep.Applied
	rep.AckP50ms, rep.AckP99ms = usMs(botRep.AckP50us), usMs(botRep.AckP99us)
	rep.AppliedP99ms = usMs(botRep.AppliedP99us)
	rep.DownBytesSec = botRep.DownBytesPerSec

	say("\nsummary\n")
	say("  players        %d bots (captain behaviour), %d ticks (%.1f s at %d Hz)\n", rep.Players, rep.Ticks, float64(rep.Ticks)/broadside.TickRate, broadside.TickRate)
	say("  commands       %d acknowledged durable (p50 %.2f ms, p99 %.2f ms), %d seen applied (p99 %.0f ms)\n",
		rep.Acked, rep.AckP50ms, rep.AckP99ms, rep.Applied, rep.AppliedP99ms)
	say("  lost           %d (of %d acknowledged; %d duplicated)\n", rep.Lost, rep.Acked, rep.Duplicated)
	say("  battle         %d cannonballs fired, %d ships sunk\n", rep.BallsFired, rep.Sunk)
	if rep.Recoveries > 0 {
		say("  recoveries     %d, took %v ms\n", rep.Recoveries, rep.RecoveryMs)
	} else {
		say("  recoveries     0\n")
	}
	if rep.ViewChangeMs > 0 {
		say("  view change    %.0f ms after the leader crashed\n", rep.ViewChangeMs)
	}
	say("  determinism    %v (%d tick hashes re-simulated from the log)\n", rep.DeterminismOK, rep.TicksChecked)
	say("  state          %.0f B/s down per client\n", rep.DownBytesSec)
	say("  recording      %s (%d KiB)\n", rep.Recording, rep.RecordingBytes/1024)
	say("                 broadside replay info %s\n", rep.Recording)
	say("                 broadside replay verify %s\n", rep.Recording)
	say("                 broadside-viewer %s\n", rep.Recording)

	if o.jsonFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonFile, append(b, '\n'), 0o644); err != nil {
			return rep, err
		}
	}
	switch {
	case rep.Lost > 0:
		return rep, fmt.Errorf("%d acknowledged commands are missing from the log", rep.Lost)
	case rep.Duplicated > 0:
		return rep, fmt.Errorf("%d acknowledged commands are in the log more than once", rep.Duplicated)
	case rep.RecoveryMismatched > 0:
		return rep, fmt.Errorf("a recovered sector replayed %d ticks to hashes other than the live run's", rep.RecoveryMismatched)
	case !rep.DeterminismOK:
		return rep, errors.New("the re-simulation diverged from the live run")
	}
	return rep, nil
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

// readWholeLog reads the log from position 1 to its tail.
func readWholeLog(ctx context.Context, l worldLog) ([]msg.Entry, error) {
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

// resimulate runs every sector of game from scratch over entries through
// tick final and compares each tick's hash with the live run's history. It
// returns the number of (sector, tick) hashes that matched, a description
// of the first divergence ("" if none), and the world's totals.
func resimulate(ctx context.Context, game broadside.Config, entries []msg.Entry, final uint64,
	live func(shard uint32) *replay.HashHistory) (uint64, string, broadside.Stats, error) {
	var matched uint64
	var firstDiv string
	var firstTick uint64
	var total broadside.Stats
	for i := range game.Sectors() {
		sec, err := broadside.NewSector(game, i)
		if err != nil {
			return 0, "", total, err
		}
		hist := live(uint32(i))
		r, err := replay.NewRunner(replay.RunnerConfig{
			World: defaultWorldID, Shard: uint32(i), Sim: sec, Source: replay.NewSliceSource(entries, 1),
			HistoryTicks: int(final) + 1, Logger: quietLogger(),
		})
		if err != nil {
			return 0, "", total, err
		}
		if err := r.RunUntil(ctx, final); err != nil && !errors.Is(err, replay.ErrEndOfLog) {
			return 0, "", total, fmt.Errorf("sector %d: %w", i, err)
		}
		for t := uint64(1); t <= final; t++ {
			got, ok1 := r.Hashes().Get(t)
			want, ok2 := hist.Get(t)
			switch {
			case !ok1 || !ok2:
				if firstDiv == "" || t < firstTick {
					firstDiv, firstTick = fmt.Sprintf("sector %d tick %d: hash missing (re-simulated %v, live %v)", i, t, ok1, ok2), t
				}
			case got.Hash != want.Hash:
				if firstDiv == "" || t < firstTick {
					firstDiv, firstTick = fmt.Sprintf("sector %d tick %d: re-simulated %016x, live %016x", i, t, got.Hash, want.Hash), t
				}
			default:
				matched++
			}
		}
		st := sec.Stats()
		total.Sunk += st.Sunk
		total.BallsFired += st.BallsFired
	}
	return matched, firstDiv, total, nil
}
