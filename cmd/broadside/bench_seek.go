package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
	"github.com/spf13/cobra"
)

func init() { registerBenchCmd(newBenchSeekCmd) }

// defaultRecordGame is the world 'serve' runs with its default flags
// (--seed 1 --world-size 4000 --sectors 2 --islands 12); the seek
// benchmark and 'replay export' use it.
func defaultRecordGame() broadside.Config {
	return broadside.Config{Seed: 1, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 12}
}

// botMatch is a replay.Source of a generated bot battle: the log a server
// running game would hold (player commands, TICK markers and the sectors'
// migrations between them, in the order the engine's runners consume
// them). It plays the world itself, one sector after the other, with the
// bench-sim bot fleet steering and firing from what it sees.
type botMatch struct {
	world   uint32
	sectors []*broadside.Sector
	fleet   *sbFleet
	ticks   uint64 // the match's length
	tick    uint64 // last tick generated
	pos     uint64
	outSeq  []uint64 // per sector
	buf     []msg.Entry
	bi      int
	pending []replay.Command
	// gen is the time spent generating (playing the world and the bots).
	gen time.Duration
}

func newBotMatch(game broadside.Config, ships int, ticks, seed uint64) (*botMatch, error) {
	m := &botMatch{world: world.DefaultID, fleet: newSBFleet(uint32(ships), seed), ticks: ticks}
	for i := range game.Sectors() {
		s, err := broadside.NewSector(game, i)
		if err != nil {
			return nil, err
		}
		m.sectors = append(m.sectors, s)
	}
	m.outSeq = make([]uint64, len(m.sectors))
	return m, nil
}

// Next implements replay.Source; ErrEndOfLog after the last tick.
func (m *botMatch) Next(ctx context.Context) (msg.Entry, error) {
	for m.bi >= len(m.buf) {
		if m.tick >= m.ticks {
			return msg.Entry{}, replay.ErrEndOfLog
		}
		if err := ctx.Err(); err != nil {
			return msg.Entry{}, err
		}
		start := time.Now()
		if err := m.generate(); err != nil {
			return msg.Entry{}, err
		}
		m.gen += time.Since(start)
	}
	e := m.buf[m.bi]
	m.bi++
	return e, nil
}

func (m *botMatch) add(id msg.RecordID, data []byte) uint64 {
	m.pos++
	m.buf = append(m.buf, msg.Entry{Pos: m.pos, Record: msg.Record{ID: id, Data: data}})
	return m.pos
}

// generate appends the next tick: the bots' commands, its marker, then
// (after stepping the world) the migrations the next tick will read.
func (m *botMatch) generate() error {
	clear(m.buf)
	m.buf, m.bi = m.buf[:0], 0
	n := m.tick + 1
	for _, rec := range m.fleet.records(n, m.sectors) {
		env, err := wire.DecodeEnvelope(rec)
		if err != nil {
			return err
		}
		at := m.add(msg.RecordID{Client: 1<<62 | uint64(env.Player), Seq: env.ClientSeq}, rec)
		m.pending = append(m.pending, replay.Command{Pos: at, Player: env.Player, ClientSeq: env.ClientSeq, Payload: env.Payload})
	}
	m.add(msg.RecordID{Client: replay.TickerClientID(m.world), Seq: n}, wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n}))
	in := m.pending
	m.pending = nil
	for i, s := range m.sectors {
		for _, o := range s.Step(n, in, lineage.Nop) {
			m.outSeq[i]++
			seq := m.outSeq[i]
			data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: n, Shard: replay.BroadcastShard, ClientSeq: seq, Payload: o.Payload})
			at := m.add(msg.RecordID{Client: replay.OutputClientID(m.world, uint32(i)), Seq: seq}, data)
			m.pending = append(m.pending, replay.Command{Pos: at, ClientSeq: seq, Payload: o.Payload})
		}
	}
	m.tick = n
	return nil
}

type seekBenchOptions struct {
	quick       bool
	jsonPath    string
	recording   string
	keep        string
	ships       int
	minutes     float64
	seeks       int
	anchorSeeks int
	noAnchors   bool
	seed        uint64
	dir         string
	prog        io.Writer
}

func newBenchSeekCmd() *cobra.Command {
	var o seekBenchOptions
	cmd := &cobra.Command{
		Use:   "seek [--recording FILE]",
		Short: "Benchmark seeking in a .bsr recording against the Unreal and CS2 models",
		Long: `Seek to random ticks of a recording and measure how long each takes (cold: every
shard restored from its snapshots, then the log replayed), with the recording's
size per minute of play.

Without --recording it first generates one: a bot match of --ships ships in
the world 'serve' runs (4 km × 4 km, 2 × 2 sectors, 12 islands), --minutes
long at 30 Hz, recorded with the default adaptive snapshot policy (seek target
16 ms). Side by side, on the same match and with our own seeker, the anchors'
models:

  unreal-30s  a full checkpoint every 30 s and fast-forward (Unreal Engine replays)
  cs2-60s     a full snapshot every 60 s and no index: the file is read from the
              start up to the tick before the seek (CS2 demos)

--quick: a 3-minute match, fewer seeks. The JSON keys seek_p50_ms, seek_p99_ms
and bytes_per_minute are ours.`,
		Example: `  broadside bench seek --quick
  broadside replay export --bots 20 --minutes 1 -o bots.bsr
  broadside bench seek --recording bots.bsr --seeks 200 --no-anchors`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.quick {
				if !cmd.Flags().Changed("minutes") {
					o.minutes = 3
				}
				if !cmd.Flags().Changed("seeks") {
					o.seeks = 200
				}
				if !cmd.Flags().Changed("anchor-seeks") {
					o.anchorSeeks = 40
				}
			}
			o.prog = cmd.ErrOrStderr()
			res, err := runSeekBench(ctx, o)
			if err != nil {
				return err
			}
			res.writeTable(cmd.OutOrStdout())
			if o.jsonPath != "" {
				f, err := os.Create(o.jsonPath)
				if err != nil {
					return err
				}
				defer f.Close()
				return rpWriteJSON(f, res.json())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.quick, "quick", false, "a 3-minute match and fewer seeks (about a minute)")
	f.StringVar(&o.jsonPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&o.recording, "recording", "", "measure this recording instead of generating one")
	f.StringVar(&o.keep, "keep", "", "keep the generated recording at this path")
	f.IntVar(&o.ships, "ships", 200, "bot ships in the generated match")
	f.Float64Var(&o.minutes, "minutes", 60, "length of the generated match in minutes")
	f.IntVar(&o.seeks, "seeks", 1000, "random seeks measured on our recording")
	f.IntVar(&o.anchorSeeks, "anchor-seeks", 200, "random seeks measured on each anchor model")
	f.BoolVar(&o.noAnchors, "no-anchors", false, "measure our recording only")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the bots and of the random ticks")
	f.StringVar(&o.dir, "dir", "", "directory for the recordings (default: the system's temporary directory)")
	return cmd
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
	opts        seekBenchOptions
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

func runSeekBench(ctx context.Context, o seekBenchOptions) (*seekBenchResult, error) {
	res := &seekBenchResult{opts: o, ships: o.ships}
	say := func(format string, args ...any) { fmt.Fprintf(o.prog, "bench seek: "+format+"\n", args...) }
	dir, err := os.MkdirTemp(o.dir, "broadside-bench-seek-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ours := &seekContender{name: "broadside", model: "adaptive snapshots (seek target 16 ms) + index", path: o.recording}
	if ours.path == "" {
		ours.path = filepath.Join(dir, "ours.bsr")
		if o.keep != "" {
			ours.path = o.keep
		}
		res.game = defaultRecordGame()
		ticks := uint64(o.minutes * 60 * broadside.TickRate)
		m, err := newBotMatch(res.game, o.ships, ticks, o.seed)
		if err != nil {
			return nil, err
		}
		say("recording a %.0f-minute bot match (%d ticks, %d ships, %d × %d m, %d sectors) to %s",
			o.minutes, ticks, o.ships, res.game.Width, res.game.Height, res.game.Sectors(), ours.path)
		start := time.Now()
		last := start
		g, err := broadside.NewGame(res.game, 0)
		if err != nil {
			return nil, err
		}
		st, _, err := recordMatch(ctx, ours.path, g, world.DefaultID, m, bsr.RecordConfig{Progress: func(t uint64) {
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
		res.genTook = m.gen
		res.recordTicks = st.Ticks
		res.recorderPerTick = (ours.recordTook - m.gen) / time.Duration(st.Ticks)
		res.stepPerTick = st.Step / time.Duration(st.Ticks)
		for _, s := range m.sectors {
			res.balls += s.BallCount()
		}
		say("recorded in %.1f s: generating the match %.1f s, the recorder %.1f s (%.2f ms per tick, of which the sectors' steps %.2f ms)",
			ours.recordTook.Seconds(), m.gen.Seconds(), (ours.recordTook - m.gen).Seconds(), rpMs(res.recorderPerTick), rpMs(res.stepPerTick))
	}
	contenders := []*seekContender{ours}
	if !o.noAnchors {
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
			r, game, _, err := openRecording(ours.path)
			if err != nil {
				return nil, err
			}
			src, err := r.Source()
			if err != nil {
				r.Close()
				return nil, err
			}
			start := time.Now()
			_, _, err = recordMatch(ctx, c.path, game, r.Header().World, src, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: a.every}})
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
		n := o.seeks
		if i > 0 {
			n = o.anchorSeeks
		}
		if err := measureSeeks(ctx, c, n, o.seed, say); err != nil {
			return nil, err
		}
		if res.game.Sectors() == 0 {
			if r, _, game, err := openRecording(c.path); err == nil {
				res.game = game
				r.Close()
			}
		}
	}
	return res, nil
}

// measureSeeks seeks to n random ticks of c's recording, each cold.
func measureSeeks(ctx context.Context, c *seekContender, n int, seed uint64, say func(string, ...any)) error {
	r, game, _, err := openRecording(c.path)
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
	say("%s: %d random seeks over ticks %d..%d (%s, %s per minute)", c.name, n, r.BaseTick(), r.LastTick(), rpBytes(float64(c.bytes)), rpBytes(c.bytesPerMinute()))
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

func durQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
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
		"seek_p50_ms":          round3(rpMs(durQuantile(ours.seeks, 0.5))),
		"seek_p99_ms":          round3(rpMs(durQuantile(ours.seeks, 0.99))),
		"seek_max_ms":          round3(rpMs(slices.Max(ours.seeks))),
		"seeks_under_16ms":     ours.under(16 * time.Millisecond),
		"bytes_per_minute":     round3(ours.bytesPerMinute()),
		"recording_bytes":      ours.bytes,
		"recording_minutes":    round3(float64(ours.ticks) / broadside.TickRate / 60),
		"seeks":                len(ours.seeks),
		"full_snapshots":       ours.full,
		"delta_snapshots":      ours.delta,
		"world":                r.game,
		"ships":                r.ships,
		"recorder_ms_per_tick": round3(rpMs(r.recorderPerTick)),
	}
	anchors := map[string]any{}
	for _, c := range r.contenders[1:] {
		anchors[c.name] = map[string]any{
			"model":            c.model,
			"seek_p50_ms":      round3(rpMs(durQuantile(c.seeks, 0.5))),
			"seek_p99_ms":      round3(rpMs(durQuantile(c.seeks, 0.99))),
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
		rpPlayTime(ours.ticks), ours.ticks, broadside.TickRate, r.game.Width, r.game.Height, r.game.Sectors())
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
		p99 := durQuantile(c.seeks, 0.99)
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f%%\t%.0f\t%s\t%.1f×\t%.2f×\t\n", c.name, len(c.seeks),
			rpMs(durQuantile(c.seeks, 0.5)), rpMs(p99), rpMs(slices.Max(c.seeks)), 100*c.under(16*time.Millisecond),
			float64(rep)/float64(max(1, len(c.replayed))), rpBytes(c.bytesPerMinute()),
			float64(p99)/float64(max(1, durQuantile(ours.seeks, 0.99))), c.bytesPerMinute()/ours.bytesPerMinute())
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, c := range r.contenders {
		fmt.Fprintf(w, "  %-10s %s; %d full and %d delta snapshots\n", c.name, c.model, c.full, c.delta)
	}
	if r.recordTicks > 0 {
		fmt.Fprintf(w, "\nrecorder: %.2f ms per tick (sectors' steps %.2f ms of it), %.1f%% of a %d Hz tick; the match itself took %.1f s to generate\n",
			rpMs(r.recorderPerTick), rpMs(r.stepPerTick), 100*r.recorderPerTick.Seconds()*broadside.TickRate, broadside.TickRate, r.genTook.Seconds())
	}
}
