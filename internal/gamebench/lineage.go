package gamebench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/table"
	"github.com/anoptic/broadside/replay/world"
)

// linBenchReport is the result; the first three fields are the headline
// figures.
type linBenchReport struct {
	OverheadPct  float64 `json:"overhead_pct"`
	BytesPerTick float64 `json:"bytes_per_tick"`
	WhyP99Us     float64 `json:"why_p99_us"`

	Quick   bool   `json:"quick"`
	Ships   int    `json:"ships"`
	Sectors int    `json:"sectors"`
	Store   string `json:"store"`
	Triples int    `json:"triples"`
	// Background (the headline) and Inline: the recorder sealing ranges
	// on its own goroutine or on the tick loop.
	Background linBenchOverhead `json:"background"`
	Inline     linBenchOverhead `json:"inline"`
	TickNopUs  float64          `json:"tick_nop_median_us"`
	// What the battle looked like.
	EventsPerTick float64 `json:"events_per_tick"`
	InputsPerTick float64 `json:"inputs_per_tick"`
	BallsInAir    float64 `json:"balls_in_air"`

	MatchTicks    int     `json:"match_ticks"`
	MatchMinutes  float64 `json:"match_minutes"`
	StoredBytes   int     `json:"stored_bytes"`
	IndexLoadMs   float64 `json:"index_load_ms"`
	IndexHeapMB   float64 `json:"index_heap_mb"`
	IndexEvents   int     `json:"index_events"`
	IndexEntities int     `json:"index_entities"`

	WhyDepth   int                  `json:"why_depth"`
	WhyQueries int                  `json:"why_queries"`
	Why        []linBenchWhyLatency `json:"why"`
}

// linBenchOverhead compares a recording configuration with lineage.Nop.
type linBenchOverhead struct {
	// OverheadPct is 100 × (RatioMedian − 1).
	OverheadPct float64 `json:"overhead_pct"`
	// RatioMedian is the median over triples of consecutive ticks (one
	// tick in each role) of the recording tick's step time over the no-op
	// tick's.
	RatioMedian float64 `json:"ratio_median"`
	RatioP25    float64 `json:"ratio_p25"`
	RatioP75    float64 `json:"ratio_p75"`
	// MeanRatio is total recording time over total no-op time: unlike the
	// median it carries the ticks that seal a range.
	MeanRatio float64 `json:"ratio_of_totals"`
	TickUs    float64 `json:"tick_median_us"`
}

type linBenchWhyLatency struct {
	Depth      int     `json:"depth"`
	Queries    int     `json:"queries"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	MaxUs      float64 `json:"max_us"`
	MeanCauses float64 `json:"mean_causes"`
	MaxCauses  int     `json:"max_causes"`
	// ListAllP99Us is the p99 of listing every command of the answer
	// (Causes(0)), on top of the query.
	ListAllP99Us float64 `json:"list_all_p99_us"`
}

// LineageConfig configures RunLineage (`broadside bench lineage`).
type LineageConfig struct {
	// Quick marks a short run in the report (the counts below are the
	// caller's).
	Quick bool
	// Ships is the number of bot ships (at least 2).
	Ships int
	// Triples of ticks measured (one tick per role each), at least 1.
	Triples int
	// MatchTicks is the length of the match Why is measured on, at least
	// 3 × Triples + the warm-up.
	MatchTicks int
	// Queries is the number of Why queries per depth (a tenth of them
	// unlimited); Depth is the depth of the headline figure.
	Queries, Depth int
	// Seed seeds the world and the bots.
	Seed uint64
	// MemoryStore records into memory instead of Pebble.
	MemoryStore bool
	Output
}

// LineageWarmup is the ticks played before measuring (the battle is in
// full swing by then).
const LineageWarmup = 300

// RunLineage measures lineage recording's overhead, size and Why latency,
// and writes the report to out and the JSON file the config names.
func RunLineage(ctx context.Context, cfg LineageConfig, out io.Writer) error {
	if cfg.Triples < 1 || cfg.Ships < 2 || cfg.MatchTicks < 3*cfg.Triples+LineageWarmup {
		return fmt.Errorf("need --triples ≥ 1, --ships ≥ 2 and --match-ticks ≥ 3 × triples + %d", LineageWarmup)
	}
	cfg.Output = cfg.Output.withDefaults()
	rep, err := runLineageBench(ctx, cfg)
	if err != nil {
		return err
	}
	linPrintBench(out, rep)
	return cfg.writeJSON(rep)
}

// Roles of a world in a block.
const (
	linRoleNop = iota
	linRoleInline
	linRoleBackground
	linRoles
)

// linBenchWorld is a world (a LocalWorld: one Runner per sector, as the
// engine runs them) and its recorders; every runner records to the
// recorder of the current role.
type linBenchWorld struct {
	w    *world.LocalWorld
	rec  *roleRecorder
	logs [linRoles]*lineage.Log // nil for linRoleNop
	step []time.Duration
}

func (b *linBenchWorld) submit(player uint32, c broadside.PlayerCommand) error {
	p, err := broadside.EncodeCommand(c)
	if err != nil {
		return err
	}
	return b.w.Submit(player, p)
}

// hash combines the sectors' state hashes, in sector order.
func (b *linBenchWorld) hash() uint64 {
	h := uint64(b.w.Shards())
	for i := range b.w.Shards() {
		h = table.Mix64(h ^ b.w.Sim(uint32(i)).Hash())
	}
	return h
}

// sector returns sector i (between steps).
func (b *linBenchWorld) sector(i int) *broadside.Sector {
	return b.w.Sim(uint32(i)).(*broadside.Sector)
}

func (b *linBenchWorld) ballCount() int {
	n := 0
	for i := range b.w.Shards() {
		n += b.sector(i).BallCount()
	}
	return n
}

// stepOnce runs one tick in a role, timing what the engine runs per tick.
func (b *linBenchWorld) stepOnce(ctx context.Context, role int) error {
	b.rec.set(b.logs[role])
	start := time.Now()
	err := b.w.Step()
	b.step = append(b.step, time.Since(start))
	return err
}

// roleRecorder is the recorder of every runner of a linBenchWorld: it
// passes on to the Log of the current role, or records nothing (the Nop
// role: the bracket calls then return at once).
type roleRecorder struct{ lg *lineage.Log }

func (r *roleRecorder) set(lg *lineage.Log) { r.lg = lg }

// Command implements lineage.Recorder.
func (r *roleRecorder) Command(e lineage.EntityID, pos uint64) {
	if r.lg != nil {
		r.lg.Command(e, pos)
	}
}

// Derived implements lineage.Recorder.
func (r *roleRecorder) Derived(e, from lineage.EntityID) {
	if r.lg != nil {
		r.lg.Derived(e, from)
	}
}

// BeginTick implements lineage.TickRecorder.
func (r *roleRecorder) BeginTick(ctx context.Context, shard lineage.ShardID, tick uint64) error {
	if r.lg == nil {
		return nil
	}
	return r.lg.BeginTick(ctx, shard, tick)
}

// Input implements lineage.TickRecorder.
func (r *roleRecorder) Input(c lineage.CommandInfo) {
	if r.lg != nil {
		r.lg.Input(c)
	}
}

// EndTick implements lineage.TickRecorder.
func (r *roleRecorder) EndTick(ctx context.Context) error {
	if r.lg == nil {
		return nil
	}
	return r.lg.EndTick(ctx)
}

type linOrder struct {
	player uint32
	cmd    broadside.PlayerCommand
}

// linBench is one run of the lineage benchmark: the planner, an untimed
// world on which the bots think and which records the whole match
// (background sealing) for the Why measurement, and the measured world,
// which replays the planner's orders.
type linBench struct {
	ctx     context.Context
	o       LineageConfig
	game    broadside.Config
	rep     *linBenchReport
	cleanup []func()

	plan, meas *linBenchWorld
	matchLog   *lineage.Log // the planner's
	fleet      *broadside.Fleet
	views      []broadside.ShipView
	orders     []linOrder // the planner's orders for the next tick
}

func runLineageBench(ctx context.Context, o LineageConfig) (*linBenchReport, error) {
	game := broadside.DefaultConfig()
	game.Seed = o.Seed
	rep := &linBenchReport{Quick: o.Quick, Ships: o.Ships, Sectors: game.Sectors(), Triples: o.Triples,
		MatchTicks: o.MatchTicks, MatchMinutes: float64(o.MatchTicks) / broadside.TickRate / 60, WhyDepth: o.Depth, Store: "pebble"}
	if o.MemoryStore {
		rep.Store = "memory"
	}
	b := &linBench{ctx: ctx, o: o, game: game, rep: rep, fleet: broadside.NewFleet(o.Seed, true)}
	defer func() {
		for i := len(b.cleanup) - 1; i >= 0; i-- {
			b.cleanup[i]()
		}
	}()
	if err := b.start(); err != nil {
		return nil, err
	}
	if err := b.measureOverhead(); err != nil {
		return nil, err
	}
	if err := b.finishMatch(); err != nil {
		return nil, err
	}
	ix, err := b.loadIndex()
	if err != nil {
		return nil, err
	}
	if err := b.measureWhy(ix); err != nil {
		return nil, err
	}
	runtime.KeepAlive(ix)
	return rep, nil
}

// newStore opens a store (a Pebble one in a temporary directory).
func (b *linBench) newStore() (lineage.Store, error) {
	if b.o.MemoryStore {
		return lineage.NewMemStore(), nil
	}
	dir, err := os.MkdirTemp("", "broadside-bench-lineage-")
	if err != nil {
		return nil, err
	}
	b.cleanup = append(b.cleanup, func() { os.RemoveAll(dir) })
	s, err := lineage.OpenPebble(dir, lineage.PebbleOptions{Logger: b.o.Logger})
	if err != nil {
		return nil, err
	}
	b.cleanup = append(b.cleanup, func() { s.Close() })
	return s, nil
}

func (b *linBench) newLog(background bool) (*lineage.Log, error) {
	s, err := b.newStore()
	if err != nil {
		return nil, err
	}
	if err := lineage.PutKindNames(b.ctx, s, broadside.KindNames); err != nil {
		return nil, err
	}
	lg := lineage.NewLog(lineage.LogOptions{Store: s, RangeTicks: lineage.DefaultRangeTicks, Background: background})
	b.cleanup = append(b.cleanup, func() { lg.Close(b.ctx) })
	return lg, nil
}

func (b *linBench) newWorld() (*linBenchWorld, error) {
	game, err := broadside.NewGame(b.game, 0)
	if err != nil {
		return nil, err
	}
	bw := &linBenchWorld{rec: &roleRecorder{}}
	bw.w, err = world.NewLocal(world.LocalConfig{Game: game, Logger: b.o.Logger,
		Recorder: func(uint32) lineage.Recorder { return bw.rec }})
	if err != nil {
		return nil, err
	}
	b.cleanup = append(b.cleanup, bw.w.Close)
	for p := uint32(1); p <= uint32(b.o.Ships); p++ {
		if err := bw.submit(p, broadside.Join()); err != nil {
			return nil, err
		}
	}
	return bw, nil
}

// start creates the planner and the measured world with their logs and
// warms up, both of the measured world's logs recording half the ticks
// (their buffers grow to a range's size).
func (b *linBench) start() error {
	var err error
	if b.plan, err = b.newWorld(); err != nil {
		return err
	}
	if b.plan.logs[linRoleBackground], err = b.newLog(true); err != nil {
		return err
	}
	b.matchLog = b.plan.logs[linRoleBackground]
	if b.meas, err = b.newWorld(); err != nil {
		return err
	}
	if b.meas.logs[linRoleInline], err = b.newLog(false); err != nil {
		return err
	}
	if b.meas.logs[linRoleBackground], err = b.newLog(true); err != nil {
		return err
	}
	fmt.Fprintf(b.o.Progress, "bench lineage: %d ships, warming up ...\n", b.o.Ships)
	for b.plan.w.Tick() < LineageWarmup {
		if err := b.planTick(); err != nil {
			return err
		}
		if _, err := b.measTick(linRoleInline + int(b.plan.w.Tick()%2)); err != nil {
			return err
		}
	}
	return nil
}

func (b *linBench) submit(to *linBenchWorld) {
	for _, x := range b.orders {
		_ = to.submit(x.player, x.cmd)
	}
}

// planTick steps the planner, lets the bots think on it and gives it their
// orders for the next tick.
func (b *linBench) planTick() error {
	if err := b.plan.stepOnce(b.ctx, linRoleBackground); err != nil {
		return err
	}
	b.plan.step = b.plan.step[:0]
	b.views = b.views[:0]
	for i := range b.plan.w.Shards() {
		b.plan.sector(i).Ships(func(v broadside.ShipView) { b.views = append(b.views, v) })
	}
	b.orders = b.orders[:0]
	b.fleet.Act(b.plan.w.Tick(), b.views, func(p uint32, c broadside.PlayerCommand) { b.orders = append(b.orders, linOrder{p, c}) })
	b.submit(b.plan)
	return nil
}

// measTick steps the measured world in role and gives it the orders the
// planner gave for the next tick.
func (b *linBench) measTick(role int) (time.Duration, error) {
	b.meas.step = b.meas.step[:0]
	if err := b.meas.stepOnce(b.ctx, role); err != nil {
		return 0, err
	}
	b.submit(b.meas)
	return b.meas.step[0], nil
}

// measureOverhead steps the triples, each tick of a triple in another
// role, in one of the six orders in turn, then closes the measured world.
func (b *linBench) measureOverhead() error {
	perms := [6][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}
	var inRatios, bgRatios []float64
	var totals [linRoles]time.Duration
	var ticks [linRoles][]time.Duration
	var ballSum, ballN float64
	eventsBefore, ticksBefore := b.matchLog.Stats(), b.plan.w.Tick()
	for tr := 0; tr < b.o.Triples; tr++ {
		var t [linRoles]time.Duration
		for _, role := range perms[tr%len(perms)] {
			if err := b.planTick(); err != nil {
				return err
			}
			d, err := b.measTick(role)
			if err != nil {
				return err
			}
			t[role] = d
			totals[role] += d
			ticks[role] = append(ticks[role], d)
		}
		if b.meas.hash() != b.plan.hash() {
			return fmt.Errorf("tick %d: the measured world diverged from the planner", b.meas.w.Tick())
		}
		inRatios = append(inRatios, float64(t[linRoleInline])/float64(t[linRoleNop]))
		bgRatios = append(bgRatios, float64(t[linRoleBackground])/float64(t[linRoleNop]))
		if tr%16 == 0 {
			ballSum += float64(b.plan.ballCount())
			ballN++
		}
		if tr%200 == 199 {
			fmt.Fprintf(b.o.Progress, "\rbench lineage: triple %d/%d", tr+1, b.o.Triples)
		}
	}
	fmt.Fprintln(b.o.Progress)
	rep := b.rep
	eventsAfter := b.matchLog.Stats()
	n := float64(b.plan.w.Tick() - ticksBefore)
	rep.EventsPerTick = float64(eventsAfter.Events-eventsBefore.Events) / n
	rep.InputsPerTick = float64(eventsAfter.Inputs-eventsBefore.Inputs) / n
	rep.BallsInAir = ballSum / max(ballN, 1)
	overhead := func(role int, ratios []float64) linBenchOverhead {
		ov := linBenchOverhead{RatioMedian: report.ValueQuantile(ratios, 0.5, linRatioUnit), RatioP25: report.ValueQuantile(ratios, 0.25, linRatioUnit),
			RatioP75: report.ValueQuantile(ratios, 0.75, linRatioUnit), MeanRatio: float64(totals[role]) / float64(totals[linRoleNop]),
			TickUs: report.Us(report.Quantile(ticks[role], 0.5))}
		ov.OverheadPct = 100 * (ov.RatioMedian - 1)
		return ov
	}
	rep.Background, rep.Inline = overhead(linRoleBackground, bgRatios), overhead(linRoleInline, inRatios)
	rep.OverheadPct = rep.Background.OverheadPct
	rep.TickNopUs = report.Us(report.Quantile(ticks[linRoleNop], 0.5))
	for _, lg := range b.meas.logs {
		if lg != nil {
			if err := lg.Close(b.ctx); err != nil {
				return err
			}
		}
	}
	b.meas = nil
	return nil
}

// linRatioUnit is the resolution of the step-time ratios' quantiles.
const linRatioUnit = 1e-6

// finishMatch plays the rest of the match, recorded by the planner only.
func (b *linBench) finishMatch() error {
	for int(b.plan.w.Tick()) < b.o.MatchTicks {
		if err := b.planTick(); err != nil {
			return err
		}
		if t := b.plan.w.Tick(); t%600 == 0 {
			fmt.Fprintf(b.o.Progress, "\rbench lineage: match tick %d/%d", t, b.o.MatchTicks)
		}
	}
	fmt.Fprintln(b.o.Progress)
	return b.matchLog.Flush(b.ctx)
}

// loadIndex loads the match's lineage index, measuring the time and heap
// it takes, and the store's size.
func (b *linBench) loadIndex() (*lineage.Index, error) {
	rep := b.rep
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	ix, err := lineage.LoadIndex(b.ctx, b.matchLog.Store())
	if err != nil {
		return nil, err
	}
	rep.IndexLoadMs = float64(time.Since(start).Microseconds()) / 1000
	runtime.GC()
	runtime.ReadMemStats(&after)
	rep.IndexHeapMB = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / (1 << 20)
	st := ix.Stats()
	rep.StoredBytes, rep.IndexEvents, rep.IndexEntities = st.Bytes, st.Events, st.Entities
	rep.BytesPerTick = float64(st.Bytes) / float64(st.LastTick-st.FirstTick+1)
	return ix, nil
}

// measureWhy times Why over random (ship, tick) at depth 2, the headline
// depth and unlimited.
func (b *linBench) measureWhy(ix *lineage.Index) error {
	o := b.o
	rng := rand.New(rand.NewPCG(o.Seed, 0x11e))
	last := b.plan.w.Tick()
	depths := []int{2, o.Depth, lineage.Unlimited}
	if o.Depth == 2 || o.Depth < 0 {
		depths = []int{2, lineage.Unlimited}
	}
	for _, depth := range depths {
		q := o.Queries
		if depth == lineage.Unlimited {
			q = max(o.Queries/10, 20)
		}
		lat, all := report.NewDurations(), report.NewDurations()
		var causes, maxCauses int
		for i := 0; i < q; i++ {
			ship := broadside.ShipID(uint32(1 + rng.IntN(o.Ships)))
			tick := 1 + rng.Uint64N(last)
			t0 := time.Now()
			r, err := ix.Why(lineage.AnyShard, ship, tick, depth)
			if err != nil {
				return fmt.Errorf("why %s at %d: %w", broadside.EntityName(ship), tick, err)
			}
			_ = r.Causes(100)
			lat.Record(time.Since(t0))
			t1 := time.Now()
			n := len(r.Causes(0))
			all.Record(time.Since(t1))
			causes += n
			maxCauses = max(maxCauses, n)
		}
		l := linBenchWhyLatency{Depth: depth, Queries: q, P50Us: report.Us(lat.Quantile(0.5)), P99Us: report.Us(lat.Quantile(0.99)),
			MaxUs: report.Us(lat.Max()), MeanCauses: float64(causes) / float64(q), MaxCauses: maxCauses,
			ListAllP99Us: report.Us(all.Quantile(0.99))}
		b.rep.Why = append(b.rep.Why, l)
		if depth == o.Depth {
			b.rep.WhyP99Us, b.rep.WhyQueries = l.P99Us, q
		}
	}
	return nil
}

func linPrintBench(w io.Writer, r *linBenchReport) {
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	fmt.Fprintf(w, "broadside bench lineage (%s): %d ships, %d sectors, store %s\n\n", mode, r.Ships, r.Sectors, r.Store)
	fmt.Fprintf(w, "recording overhead: %d triples of consecutive ticks of one world, one tick per recorder in each\n", r.Triples)
	fmt.Fprintf(w, "  battle        %.0f lineage events, %.0f input records, %.0f cannonballs in the air per tick\n", r.EventsPerTick, r.InputsPerTick, r.BallsInAir)
	fmt.Fprintf(w, "  %-22s %11s %10s %10s %10s %12s %10s\n", "recorder", "tick p50 µs", "ratio p25", "median", "p75", "of totals", "overhead")
	fmt.Fprintf(w, "  %-22s %11.0f\n", "lineage.Nop", r.TickNopUs)
	for _, x := range []struct {
		name string
		o    linBenchOverhead
	}{{"Log, background seal", r.Background}, {"Log, inline seal", r.Inline}} {
		fmt.Fprintf(w, "  %-22s %11.0f %10.4f %10.4f %10.4f %12.4f %+9.2f%%\n", x.name, x.o.TickUs, x.o.RatioP25, x.o.RatioMedian,
			x.o.RatioP75, x.o.MeanRatio, x.o.OverheadPct)
	}
	fmt.Fprintf(w, "  overhead = median over triples of the recording/no-op step-time ratio − 1 (target < 1%%);\n")
	fmt.Fprintf(w, "  \"of totals\" includes the ticks that seal a range (encoding on the tick loop when sealing inline).\n\n")
	fmt.Fprintf(w, "size: %.0f bytes per tick (all sectors, encoded), %d bytes for %d ticks\n\n", r.BytesPerTick, r.StoredBytes, r.MatchTicks)
	fmt.Fprintf(w, "Why on a %.0f-minute match (%d ticks; index: %d events, %d entities, loaded in %.0f ms, %.0f MB of heap):\n",
		r.MatchMinutes, r.MatchTicks, r.IndexEvents, r.IndexEntities, r.IndexLoadMs, r.IndexHeapMB)
	fmt.Fprintf(w, "  %-10s %8s %10s %10s %10s %14s %12s %12s\n", "depth", "queries", "p50 µs", "p99 µs", "max µs", "mean commands", "max commands", "list all p99")
	for _, l := range r.Why {
		d := fmt.Sprint(l.Depth)
		if l.Depth < 0 {
			d = "unlimited"
		}
		fmt.Fprintf(w, "  %-10s %8d %10.0f %10.0f %10.0f %14.0f %12d %12.0f\n", d, l.Queries, l.P50Us, l.P99Us, l.MaxUs, l.MeanCauses, l.MaxCauses, l.ListAllP99Us)
	}
	fmt.Fprintf(w, "  (a query is Why plus listing its 100 nearest commands; \"list all\" is listing every command, µs)\n")
	fmt.Fprintf(w, "\nheadline: overhead_pct %.2f, bytes_per_tick %.0f, why_p99_us %.0f (depth %d)\n", r.OverheadPct, r.BytesPerTick, r.WhyP99Us, r.WhyDepth)
	if r.Quick {
		fmt.Fprintf(w, "(quick: Why measured on a %.1f-minute match, not 10 minutes)\n", r.MatchMinutes)
	}
}
