package gamebench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
)

// SeekConfig configures RunSeek (`broadside bench seek`).
type SeekConfig struct {
	// Recording is the recording to measure; "" generates a bot match of
	// Ships ships in Game, Minutes long, recorded as world World.
	Recording string
	Game      broadside.Config
	World     uint32
	Ships     int
	Minutes   float64
	// Keep, if set, is where the generated recording is kept.
	Keep string
	// Seeks and AnchorSeeks are the random seeks measured on our recording
	// and on each anchor model; NoAnchors measures ours only.
	Seeks, AnchorSeeks int
	NoAnchors          bool
	// Seed seeds the bots and the random ticks.
	Seed uint64
	// Dir holds the recordings ("": the system's temporary directory).
	Dir string
	Output
}

// RunSeek measures seeks in a recording and the anchors' models, and
// writes the table to out and the JSON file the config names.
func RunSeek(ctx context.Context, cfg SeekConfig, out io.Writer) error {
	cfg.Output = cfg.Output.withDefaults()
	res, err := runSeekBench(ctx, cfg)
	if err != nil {
		return err
	}
	res.writeTable(out)
	return cfg.writeJSON(res.json())
}

// seekContender is one recording model measured.
type seekContender struct {
	name, model string
	path        string
	bytes       int64
	ticks       uint64
	full, delta int
	seeks       []time.Duration
	replayed    []uint64
	noIndex     bool
	recordTook  time.Duration
}

func (c *seekContender) bytesPerMinute() float64 {
	return float64(c.bytes) / (float64(c.ticks) / broadside.TickRate / 60)
}

type seekBenchResult struct {
	opts        SeekConfig
	contenders  []*seekContender
	game        broadside.Config
	ships       int
	genTook     time.Duration
	recordTicks uint64
	// recorderPerTick is the recorder's own time per tick (Record's wall
	// time minus the bots' and the generating world's).
	recorderPerTick time.Duration
	stepPerTick     time.Duration
	balls           int
}

func runSeekBench(ctx context.Context, o SeekConfig) (*seekBenchResult, error) {
	res := &seekBenchResult{opts: o, ships: o.Ships}
	say := func(format string, args ...any) { fmt.Fprintf(o.Progress, "bench seek: "+format+"\n", args...) }
	dir, err := os.MkdirTemp(o.Dir, "broadside-bench-seek-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ours := &seekContender{name: "broadside", model: "adaptive snapshots (seek target 16 ms) + index", path: o.Recording}
	if ours.path == "" {
		ours.path = filepath.Join(dir, "ours.bsr")
		if o.Keep != "" {
			ours.path = o.Keep
		}
		res.game = o.Game
		ticks := uint64(o.Minutes * 60 * broadside.TickRate)
		game, err := broadside.NewGame(res.game, 0)
		if err != nil {
			return nil, err
		}
		m, err := broadside.NewBotMatch(res.game, o.Ships, o.Seed, world.LocalConfig{ID: o.World, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		src := &timedSource{src: m.Source(ticks)}
		say("recording a %.0f-minute bot match (%d ticks, %d ships, %d × %d m, %d sectors) to %s",
			o.Minutes, ticks, o.Ships, res.game.Width, res.game.Height, res.game.Sectors(), ours.path)
		start := time.Now()
		last := start
		st, _, err := world.Record(ctx, ours.path, game, o.World, src, bsr.RecordConfig{Logger: o.Logger, Progress: func(t uint64) {
			if time.Since(last) > 10*time.Second {
				last = time.Now()
				say("tick %d/%d (%.0f%%), %.0f ticks/s", t, ticks, 100*float64(t)/float64(ticks), float64(t)/time.Since(start).Seconds())
			}
		}})
		if err != nil {
			return nil, err
		}
		if st.LastTick != ticks {
			return nil, fmt.Errorf("recording stopped at tick %d of %d (%s)", st.LastTick, ticks, st.Stopped)
		}
		ours.recordTook = time.Since(start)
		res.genTook = src.took
		res.recordTicks = st.Ticks
		res.recorderPerTick = (ours.recordTook - src.took) / time.Duration(st.Ticks)
		res.stepPerTick = st.Step / time.Duration(st.Ticks)
		for i := range res.game.Sectors() {
			res.balls += m.Sector(i).BallCount()
		}
		say("recorded in %.1f s: generating the match %.1f s, the recorder %.1f s (%.2f ms per tick, of which the sectors' steps %.2f ms)",
			ours.recordTook.Seconds(), src.took.Seconds(), (ours.recordTook - src.took).Seconds(), report.Ms(res.recorderPerTick), report.Ms(res.stepPerTick))
	}
	contenders := []*seekContender{ours}
	if !o.NoAnchors {
		for _, a := range []struct {
			name, model string
			every       uint64
			noIndex     bool
		}{
			{"unreal-30s", "full checkpoint every 30 s + fast-forward", 30 * broadside.TickRate, false},
			{"cs2-60s", "full snapshot every 60 s, no index (read from the start)", 60 * broadside.TickRate, true},
		} {
			c := &seekContender{name: a.name, model: a.model, path: filepath.Join(dir, a.name+".bsr"), noIndex: a.noIndex}
			say("re-recording the match as %s (%s)", a.name, a.model)
			r, game, _, err := broadside.OpenRecording(ours.path)
			if err != nil {
				return nil, err
			}
			src, err := r.Source()
			if err != nil {
				r.Close()
				return nil, err
			}
			start := time.Now()
			_, _, err = world.Record(ctx, c.path, game, r.Header().World, src, bsr.RecordConfig{Logger: o.Logger, Snapshots: bsr.SnapshotPolicy{FullEvery: a.every}})
			r.Close()
			if err != nil {
				return nil, err
			}
			c.recordTook = time.Since(start)
			contenders = append(contenders, c)
		}
	}
	res.contenders = contenders
	for i, c := range contenders {
		n := o.Seeks
		if i > 0 {
			n = o.AnchorSeeks
		}
		if err := measureSeeks(ctx, c, n, o.Seed, say); err != nil {
			return nil, err
		}
		if res.game.Sectors() == 0 {
			if r, _, game, err := broadside.OpenRecording(c.path); err == nil {
				res.game = game
				r.Close()
			}
		}
	}
	return res, nil
}

// measureSeeks seeks to n random ticks of c's recording, each cold.
func measureSeeks(ctx context.Context, c *seekContender, n int, seed uint64, say func(string, ...any)) error {
	r, game, _, err := broadside.OpenRecording(c.path)
	if err != nil {
		return err
	}
	defer r.Close()
	in := r.Info()
	c.bytes, c.ticks, c.full, c.delta = in.FileBytes, in.Ticks, in.FullSnapshots, in.DeltaSnapshots
	if c.ticks == 0 {
		return fmt.Errorf("%s holds no tick", c.path)
	}
	sk, err := bsr.NewSeeker(r, game.NewSim)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eec))
	say("%s: %d random seeks over ticks %d..%d (%s, %s per minute)", c.name, n, r.BaseTick(), r.LastTick(), report.Bytes(float64(c.bytes)), report.Bytes(c.bytesPerMinute()))
	// One seek to warm the code and the file's pages (a viewer has the
	// file open), not measured.
	if err := sk.Seek(r.LastTick()); err != nil {
		return err
	}
	runtime.GC()
	for range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		tick := r.BaseTick() + rng.Uint64N(r.LastTick()-r.BaseTick()+1)
		sk.Reset()
		start := time.Now()
		if c.noIndex {
			if _, err := r.ScanTo(tick); err != nil {
				return err
			}
		}
		if err := sk.Seek(tick); err != nil {
			return fmt.Errorf("%s: seek to %d: %w", c.name, tick, err)
		}
		c.seeks = append(c.seeks, time.Since(start))
		c.replayed = append(c.replayed, sk.LastSeek().Replayed)
	}
	return nil
}

func (c *seekContender) under(limit time.Duration) float64 {
	n := 0
	for _, d := range c.seeks {
		if d < limit {
			n++
		}
	}
	return float64(n) / float64(max(1, len(c.seeks)))
}

func (r *seekBenchResult) json() map[string]any {
	ours := r.contenders[0]
	out := map[string]any{
		"seek_p50_ms":          round3(report.Ms(report.Quantile(ours.seeks, 0.5))),
		"seek_p99_ms":          round3(report.Ms(report.Quantile(ours.seeks, 0.99))),
		"seek_max_ms":          round3(report.Ms(slices.Max(ours.seeks))),
		"seeks_under_16ms":     ours.under(16 * time.Millisecond),
		"bytes_per_minute":     round3(ours.bytesPerMinute()),
		"recording_bytes":      ours.bytes,
		"recording_minutes":    round3(float64(ours.ticks) / broadside.TickRate / 60),
		"seeks":                len(ours.seeks),
		"full_snapshots":       ours.full,
		"delta_snapshots":      ours.delta,
		"world":                r.game,
		"ships":                r.ships,
		"recorder_ms_per_tick": round3(report.Ms(r.recorderPerTick)),
	}
	anchors := map[string]any{}
	for _, c := range r.contenders[1:] {
		anchors[c.name] = map[string]any{
			"model":            c.model,
			"seek_p50_ms":      round3(report.Ms(report.Quantile(c.seeks, 0.5))),
			"seek_p99_ms":      round3(report.Ms(report.Quantile(c.seeks, 0.99))),
			"bytes_per_minute": round3(c.bytesPerMinute()),
			"seeks":            len(c.seeks),
		}
	}
	if len(anchors) > 0 {
		out["anchors"] = anchors
	}
	return out
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func (r *seekBenchResult) writeTable(w io.Writer) {
	ours := r.contenders[0]
	fmt.Fprintf(w, "\nbench seek: %s of play, %d ticks at %d Hz, world %d × %d m in %d sectors",
		report.PlayTime(ours.ticks, broadside.TickRate), ours.ticks, broadside.TickRate, r.game.Width, r.game.Height, r.game.Sectors())
	if r.recordTicks > 0 {
		fmt.Fprintf(w, ", %d bot ships (%d cannonballs in the air at the end)", r.ships, r.balls)
	}
	fmt.Fprintf(w, "; GOMAXPROCS %d\n\n", runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tseeks\tp50 ms\tp99 ms\tmax ms\t< 16 ms\tmean ticks replayed\tbytes/min\tp99 vs ours\tsize vs ours\t")
	for _, c := range r.contenders {
		var rep uint64
		for _, v := range c.replayed {
			rep += v
		}
		p99 := report.Quantile(c.seeks, 0.99)
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f%%\t%.0f\t%s\t%.1f×\t%.2f×\t\n", c.name, len(c.seeks),
			report.Ms(report.Quantile(c.seeks, 0.5)), report.Ms(p99), report.Ms(slices.Max(c.seeks)), 100*c.under(16*time.Millisecond),
			float64(rep)/float64(max(1, len(c.replayed))), report.Bytes(c.bytesPerMinute()),
			float64(p99)/float64(max(1, report.Quantile(ours.seeks, 0.99))), c.bytesPerMinute()/ours.bytesPerMinute())
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, c := range r.contenders {
		fmt.Fprintf(w, "  %-10s %s; %d full and %d delta snapshots\n", c.name, c.model, c.full, c.delta)
	}
	if r.recordTicks > 0 {
		fmt.Fprintf(w, "\nrecorder: %.2f ms per tick (sectors' steps %.2f ms of it), %.1f%% of a %d Hz tick; the match itself took %.1f s to generate\n",
			report.Ms(r.recorderPerTick), report.Ms(r.stepPerTick), 100*r.recorderPerTick.Seconds()*broadside.TickRate, broadside.TickRate, r.genTook.Seconds())
	}
}

// timedSource is a Source that measures the time spent in Next: for a
// generated match, the time spent playing it.
type timedSource struct {
	src  replay.Source
	took time.Duration
}

// Next implements replay.Source.
func (t *timedSource) Next(ctx context.Context) (msg.Entry, error) {
	start := time.Now()
	e, err := t.src.Next(ctx)
	t.took += time.Since(start)
	return e, err
}
