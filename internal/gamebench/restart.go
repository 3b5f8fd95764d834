package gamebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/logbench"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay/world"
)

// RestartConfig configures RunRestart (`broadside bench restart`).
type RestartConfig struct {
	// Game is the world ('serve''s default world).
	Game broadside.Config
	// Minutes are the simulated lengths of the matches killed and
	// restarted (default 1, 10, 60).
	Minutes []float64
	// Runs is the number of kills and restarts per match (default 3).
	Runs int
	// Players is the number of scripted players whose commands feed the
	// match while it is built (default 20).
	Players int
	// BuildRate is the ticker's rate while a match is built, in ticks per
	// second (default 3000: as fast as the fsynced markers go).
	BuildRate int
	// Dir is the parent of the data directories ("": the system's
	// temporary directory); they are removed afterwards.
	Dir string
	Output
}

// restartSample is one restart, each time measured from the start of the
// reopening (what a new process's start is).
type restartSample struct {
	LogOpen   time.Duration // embedded.Start returned
	LogReady  time.Duration // the reopened log answered a tail check
	FirstTick time.Duration // the first tick the reopened world appended is complete
	FirstAck  time.Duration // a reconnecting player's first command is acknowledged durable
}

// restartLength is the result for one match length.
type restartLength struct {
	Minutes   float64
	Ticks     uint64 // ticks in the match when it was first killed
	Entries   uint64 // log positions then
	LogBytes  int64  // on disk, log/ (shards, write-ahead logs, coordinator)
	WorldByte int64  // on disk, world/ (snapshots, lineage)
	BuildTime time.Duration
	Samples   []restartSample
	// Err says why a restart failed (the samples before it are kept).
	Err string
}

// RunRestart builds matches of each length in the fsync durability (the
// world's ticker running faster than real time, scripted players' commands
// appended as it goes, the world snapshotting as it would live), kills the
// whole server as a crash would and reopens it Runs times, and writes the
// table to out and the JSON file the config names.
func RunRestart(ctx context.Context, cfg RestartConfig, out io.Writer) error {
	cfg.Output = cfg.Output.withDefaults()
	if len(cfg.Minutes) == 0 {
		cfg.Minutes = []float64{1, 10, 60}
	}
	cfg.Runs = max(cfg.Runs, 1)
	if cfg.Players <= 0 {
		cfg.Players = 20
	}
	if cfg.BuildRate <= 0 {
		cfg.BuildRate = 3000
	}
	load := startLoadMeter()
	started := time.Now()
	var results []restartLength
	var errs []error
	for _, minutes := range cfg.Minutes {
		r, err := runRestartLength(ctx, cfg, minutes)
		if err != nil {
			// Keep what was measured; the table says what failed.
			r.Err = err.Error()
			errs = append(errs, fmt.Errorf("%g-minute match: %w", minutes, err))
			fmt.Fprintf(cfg.Progress, "restart: %g-minute match: %v\n", minutes, err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	busy := load.stop()
	fmt.Fprintf(out, "machine: %s\nrun: %s, %s; %s\n", logbench.MachineDescription(), started.UTC().Format(time.RFC3339),
		time.Since(started).Round(time.Second), busy)
	writeRestartTable(out, cfg, results)
	if err := cfg.writeJSON(restartJSON(cfg, results)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func runRestartLength(ctx context.Context, cfg RestartConfig, minutes float64) (restartLength, error) {
	res := restartLength{Minutes: minutes}
	dir, err := os.MkdirTemp(cfg.Dir, "broadside-bench-restart-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	game, err := broadside.NewGame(cfg.Game, 600_000)
	if err != nil {
		return res, err
	}
	target := uint64(minutes * 60 * float64(game.TickRate))
	fmt.Fprintf(cfg.Progress, "restart: building a %g-minute match (%d ticks, %d players) at up to %d ticks/s\n", minutes, target, cfg.Players, cfg.BuildRate)
	t0 := time.Now()
	if err := buildMatch(ctx, cfg, dir, game, target); err != nil {
		return res, fmt.Errorf("build: %w", err)
	}
	res.BuildTime = time.Since(t0)
	res.Ticks = target
	res.LogBytes, res.WorldByte = dirSize(filepath.Join(dir, "log")), dirSize(filepath.Join(dir, "world"))
	cr, err := newCredentials()
	if err != nil {
		return res, err
	}
	addr := ""
	for run := range cfg.Runs {
		s, entries, next, err := restartOnce(ctx, cfg, dir, game, cr, addr)
		if err != nil {
			return res, fmt.Errorf("restart %d: %w", run+1, err)
		}
		if run == 0 {
			res.Entries = entries
		}
		addr = next
		res.Samples = append(res.Samples, s)
		fmt.Fprintf(cfg.Progress, "restart: %g min, run %d: log open %.0f ms, answering %.0f ms, first live tick %.0f ms, first ack %.0f ms\n",
			minutes, run+1, report.Ms(s.LogOpen), report.Ms(s.LogReady), report.Ms(s.FirstTick), report.Ms(s.FirstAck))
	}
	return res, nil
}

// buildMatch runs a world on a new fsync log in dir with the ticker at
// cfg.BuildRate until tick target, scripted players' commands appended as
// ticks complete, then kills it.
func buildMatch(ctx context.Context, cfg RestartConfig, dir string, game world.Game, target uint64) error {
	fast := game
	fast.TickRate = cfg.BuildRate
	fast.NewFrame = nil
	ticks := make(chan uint64, 1)
	g, err := startGameServer(ctx, gameServerConfig{Dir: dir, Durability: seq.Fsync, Game: fast, Logger: cfg.Logger,
		OnFrame: func(_ *world.World, tick uint64) {
			select {
			case ticks <- tick:
			default:
			}
		}})
	if err != nil {
		return err
	}
	defer g.kill()
	players := newScriptedBots(uint32(cfg.Players), 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := make(chan struct{}, 256)
	var appendErr error
	var errMu sync.Mutex
	send := func(rec []byte) {
		inflight <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inflight }()
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := g.log.Log().Append(actx, rec); err != nil {
				errMu.Lock()
				appendErr = err
				errMu.Unlock()
			}
		}()
	}
	for p := uint32(1); p <= uint32(cfg.Players); p++ {
		players.seq++
		send(commandEnvelope(p, players.seq, broadside.Join()))
	}
	var fed uint64
	report := time.Now()
	for fed < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case tick := <-ticks:
			for ; fed < tick; fed++ {
				for _, rec := range players.records(fed + 1) {
					send(rec)
				}
			}
		}
		errMu.Lock()
		err := appendErr
		errMu.Unlock()
		if err != nil {
			return err
		}
		if time.Since(report) > 5*time.Second {
			report = time.Now()
			fmt.Fprintf(cfg.Progress, "restart: built %d of %d ticks\n", fed, target)
		}
	}
	return nil
}

// restartOnce reopens the killed server in dir, measures the restart,
// lets it play a second (snapshots go on), and kills it again. It returns
// the log's tail at the reopening and the server's address (kept for the
// next restart, as a restarted serve keeps its --listen).
func restartOnce(ctx context.Context, cfg RestartConfig, dir string, game world.Game, cr *credentials, addr string) (restartSample, uint64, string, error) {
	var s restartSample
	var tail uint64
	live := make(chan time.Duration, 1)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t0 := time.Now()
	g, err := startGameServer(rctx, gameServerConfig{Dir: dir, Durability: seq.Fsync, Game: game, Players: cr, Addr: addr, Logger: cfg.Logger,
		OnLogOpen: func(c *embedded.Cluster) error {
			s.LogOpen = time.Since(t0)
			var err error
			tail, err = c.Log().CheckTail(rctx)
			s.LogReady = time.Since(t0)
			return err
		},
		// The first live tick is the first complete tick whose marker the
		// reopened world appended (above the tail the reopened log had).
		OnFrame: func(w *world.World, tick uint64) {
			if th, ok := w.Hashes(0).Get(tick); ok && th.Pos > tail {
				select {
				case live <- time.Since(t0):
				default:
				}
			}
		}})
	if err != nil {
		return s, 0, "", err
	}
	acked := make(chan error, 1)
	go func() { acked <- probeAck(rctx, g.Addr(), cr, "probe") }()
	for s.FirstTick == 0 || s.FirstAck == 0 {
		select {
		case d := <-live:
			s.FirstTick, live = d, nil
		case err := <-acked:
			if err != nil {
				g.kill()
				return s, 0, "", fmt.Errorf("first acknowledgement: %w", err)
			}
			s.FirstAck, acked = time.Since(t0), nil
		case <-rctx.Done():
			g.kill()
			return s, 0, "", fmt.Errorf("no live tick or no acknowledgement within a minute: %w", rctx.Err())
		}
	}
	addr = g.Addr()
	time.Sleep(time.Second)
	g.kill()
	return s, tail, addr, nil
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// median of ds, with the range.
func medianOf(ds []time.Duration) (med, lo, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func restartField(r restartLength, f func(restartSample) time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range r.Samples {
		out = append(out, f(s))
	}
	return out
}

func firstTickOf(s restartSample) time.Duration { return s.FirstTick }
func firstAckOf(s restartSample) time.Duration  { return s.FirstAck }
func logOpenOf(s restartSample) time.Duration   { return s.LogOpen }
func logReadyOf(s restartSample) time.Duration  { return s.LogReady }

func writeRestartTable(out io.Writer, cfg RestartConfig, results []restartLength) {
	fmt.Fprintf(out, "\nRestart of a killed server (fsync durability, no clean stop), %d restarts per match: median (min-max) ms from the reopening;\n", cfg.Runs)
	fmt.Fprintf(out, "ratios of the medians against the shortest match (flat is 1.00x)\n")
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "match\tticks\tlog entries\tlog on disk\tworld on disk\tlog open\tlog answers\tfirst live tick\tfirst ack\ttick x\tack x\t\n")
	var refTick, refAck time.Duration
	for i, r := range results {
		cell := func(f func(restartSample) time.Duration) string {
			m, lo, hi := medianOf(restartField(r, f))
			return fmt.Sprintf("%.0f (%.0f-%.0f)", report.Ms(m), report.Ms(lo), report.Ms(hi))
		}
		tick, _, _ := medianOf(restartField(r, firstTickOf))
		ack, _, _ := medianOf(restartField(r, firstAckOf))
		if i == 0 {
			refTick, refAck = tick, ack
		}
		if len(r.Samples) == 0 {
			fmt.Fprintf(tw, "%g min\t%d\t%d\t%s\t%s\tfailed: %s\t\t\t\t\t\t\t\n", r.Minutes, r.Ticks, r.Entries,
				report.Bytes(float64(r.LogBytes)), report.Bytes(float64(r.WorldByte)), r.Err)
			continue
		}
		fmt.Fprintf(tw, "%g min\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2fx\t%.2fx\t\n", r.Minutes, r.Ticks, r.Entries,
			report.Bytes(float64(r.LogBytes)), report.Bytes(float64(r.WorldByte)),
			cell(logOpenOf), cell(logReadyOf), cell(firstTickOf), cell(firstAckOf),
			float64(tick)/float64(max(refTick, 1)), float64(ack)/float64(max(refAck, 1)))
	}
	tw.Flush()
	for _, r := range results {
		if r.Err != "" && len(r.Samples) > 0 {
			fmt.Fprintf(out, "%g min: after %d restarts, %s\n", r.Minutes, len(r.Samples), r.Err)
		}
	}
	fmt.Fprintf(out, "(log open: embedded.Start returned; log answers: its first tail check, after the replicas recovered from their\n")
	fmt.Fprintf(out, " write-ahead logs and agreed on a view; first live tick: the first tick the reopened world appended is complete\n")
	fmt.Fprintf(out, " in every sector; first ack: a reconnecting player's first command acknowledged durable)\n")
}

type restartLengthJSON struct {
	Minutes       float64   `json:"minutes"`
	Ticks         uint64    `json:"ticks"`
	LogEntries    uint64    `json:"log_entries"`
	LogBytes      int64     `json:"log_bytes"`
	WorldBytes    int64     `json:"world_bytes"`
	BuildSec      float64   `json:"build_s"`
	LogOpenMs     []float64 `json:"log_open_ms"`
	LogReadyMs    []float64 `json:"log_ready_ms"`
	FirstTickMs   []float64 `json:"first_tick_ms"`
	FirstAckMs    []float64 `json:"first_ack_ms"`
	FirstTickMed  float64   `json:"first_tick_ms_median"`
	FirstAckMed   float64   `json:"first_ack_ms_median"`
	DurabilityMod string    `json:"durability"`
	Error         string    `json:"error,omitempty"`
}

func restartJSON(cfg RestartConfig, results []restartLength) any {
	out := struct {
		Runs    int                 `json:"runs"`
		Players int                 `json:"players"`
		Lengths []restartLengthJSON `json:"lengths"`
	}{Runs: cfg.Runs, Players: cfg.Players}
	msOf := func(ds []time.Duration) []float64 {
		var v []float64
		for _, d := range ds {
			v = append(v, round1(report.Ms(d)))
		}
		return v
	}
	for _, r := range results {
		tick, _, _ := medianOf(restartField(r, firstTickOf))
		ack, _, _ := medianOf(restartField(r, firstAckOf))
		out.Lengths = append(out.Lengths, restartLengthJSON{Minutes: r.Minutes, Ticks: r.Ticks, LogEntries: r.Entries,
			LogBytes: r.LogBytes, WorldBytes: r.WorldByte, BuildSec: round1(r.BuildTime.Seconds()),
			LogOpenMs: msOf(restartField(r, logOpenOf)), LogReadyMs: msOf(restartField(r, logReadyOf)),
			FirstTickMs: msOf(restartField(r, firstTickOf)), FirstAckMs: msOf(restartField(r, firstAckOf)),
			FirstTickMed: round1(report.Ms(tick)), FirstAckMed: round1(report.Ms(ack)), DurabilityMod: "fsync", Error: r.Err})
	}
	return out
}
