package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/spf13/cobra"
)

// linBenchOptions configures `broadside bench lineage`.
type linBenchOptions struct {
	quick       bool
	jsonPath    string
	ships       int
	cycles      int
	matchTicks  int
	queries     int
	depth       int
	seed        uint64
	memoryStore bool
	progress    io.Writer
}

// linBenchReport is the result; the first three fields are the headline
// figures.
type linBenchReport struct {
	OverheadPct  float64 `json:"overhead_pct"`
	BytesPerTick float64 `json:"bytes_per_tick"`
	WhyP99Us     float64 `json:"why_p99_us"`

	Quick    bool   `json:"quick"`
	Ships    int    `json:"ships"`
	Sectors  int    `json:"sectors"`
	Store    string `json:"store"`
	RepTicks int    `json:"block_ticks"`
	Cycles   int    `json:"cycles"`
	// Background (the headline) and Inline: the recorder sealing ranges
	// on its own goroutine or on the tick loop.
	Background linBenchOverhead `json:"background"`
	Inline     linBenchOverhead `json:"inline"`
	TickNopUs  float64          `json:"tick_nop_median_us"`
	// EncodeUsPerTick is the CPU time of encoding and storing ranges, per
	// tick (the excess of the inline world's sealing ticks).
	EncodeUsPerTick float64 `json:"encode_us_per_tick"`
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
	// RatioMedian is the median over cycles of the cycle's ratio: the
	// geometric mean, over its three blocks, of recording step time over
	// no-op step time on the same ticks (each world takes each role once
	// per cycle, so a world's own speed cancels out).
	RatioMedian float64 `json:"ratio_median"`
	RatioP25    float64 `json:"ratio_p25"`
	RatioP75    float64 `json:"ratio_p75"`
	// BlockRatioMedian is the median of the per-block ratios.
	BlockRatioMedian float64 `json:"block_ratio_median"`
	// MeanRatio is total recording time over total no-op time.
	MeanRatio float64 `json:"ratio_of_totals"`
	TickUs    float64 `json:"tick_median_us"`
	// CPUOverheadPct is the same with the tick loop thread's CPU time
	// (Linux only; 0 elsewhere): it does not count time other processes
	// took, nor work on other threads (the background sealer, the garbage
	// collector's workers).
	CPUOverheadPct float64 `json:"cpu_overhead_pct"`
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

func newBenchLineageCmd() *cobra.Command {
	var o linBenchOptions
	cmd := &cobra.Command{
		Use:   "lineage",
		Short: "Lineage recording overhead, size and Why latency on the 1,000-ship world",
		Long: `Measure lineage on the Broadside world at 1,000 bot ships (8 km sea, 2 × 2
sectors, aggressive bots keeping about 10,000 cannonballs in the air):

  overhead  three identical worlds step the same ticks with the same orders in
            blocks of 128 ticks (one stored range): one with lineage.Nop, one
            recording with a lineage.Log that seals ranges on the tick loop, one
            with a Log that seals them on its own goroutine (BeginTick, Input for
            every record, Step, EndTick; encoding; Pebble writes). The roles
            rotate every block (a Latin square over 3-block cycles), so each
            world's own speed cancels; the figure is the median over cycles of
            the cycle's geometric-mean ratio of step times, minus one.
  size      encoded bytes per tick (all sectors) in the store
  Why       p50/p99 of Why over random (ship, tick) of a 10-minute match
            (18,000 ticks) recorded by a fourth world, at depth 2, --depth
            (default 4) and unlimited

--quick runs 5 cycles and a 80-second match (2,400 ticks), and says so.`,
		Example: `  broadside bench lineage --quick
  broadside bench lineage --json /tmp/bench-lineage.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.quick {
				if !cmd.Flags().Changed("cycles") {
					o.cycles = 5
				}
				if !cmd.Flags().Changed("match-ticks") {
					o.matchTicks = 2400
				}
				if !cmd.Flags().Changed("queries") {
					o.queries = 300
				}
			}
			if o.cycles < 1 || o.ships < 2 || o.matchTicks < 3*lineage.DefaultRangeTicks*o.cycles+2*lineage.DefaultRangeTicks {
				return fmt.Errorf("need --cycles ≥ 1, --ships ≥ 2 and --match-ticks ≥ %d", 3*lineage.DefaultRangeTicks*o.cycles+2*lineage.DefaultRangeTicks)
			}
			o.progress = cmd.ErrOrStderr()
			rep, err := runLineageBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			linPrintBench(cmd.OutOrStdout(), rep)
			if o.jsonPath != "" {
				b, _ := json.MarshalIndent(rep, "", "  ")
				if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.quick, "quick", false, "a short run: 5 cycles, an 80-second match, 300 queries")
	f.StringVar(&o.jsonPath, "json", "", "write the results as JSON to `FILE`")
	f.IntVar(&o.ships, "ships", 1000, "bot ships")
	f.IntVar(&o.cycles, "cycles", 20, "cycles of 3 blocks of 128 ticks (each world in each role once per cycle)")
	f.IntVar(&o.matchTicks, "match-ticks", 18000, "length of the match Why is measured on (30 ticks per second)")
	f.IntVar(&o.queries, "queries", 2000, "Why queries per depth (a tenth of them unlimited)")
	f.IntVar(&o.depth, "depth", 4, "the depth of the headline Why figure")
	f.Uint64Var(&o.seed, "seed", 1, "world and bot seed")
	f.BoolVar(&o.memoryStore, "memory-store", false, "record into memory instead of Pebble")
	return cmd
}

// Roles of a world in a block.
const (
	linRoleNop = iota
	linRoleInline
	linRoleBackground
	linRoles
)

// linBenchWorld is a world and its recorders.
type linBenchWorld struct {
	w    *broadside.World
	logs [linRoles]*lineage.Log // nil for linRoleNop
	step []time.Duration
}

// stepOnce runs one tick in a role, timing what the engine runs per tick.
func (b *linBenchWorld) stepOnce(ctx context.Context, role int) error {
	start := time.Now()
	lg := b.logs[role]
	if lg == nil {
		b.w.Step(lineage.Nop)
		b.step = append(b.step, time.Since(start))
		return nil
	}
	if err := lg.BeginTick(ctx, 0, b.w.Tick()+1); err != nil {
		return err
	}
	in := b.w.Step(lg)
	for i := range in {
		lg.Input(lineage.CommandInfo{Pos: in[i].Pos, Player: in[i].Player, Kind: linKindOf(&in[i])})
	}
	err := lg.EndTick(ctx)
	b.step = append(b.step, time.Since(start))
	return err
}

type linOrder struct {
	player uint32
	cmd    broadside.PlayerCommand
}

func runLineageBench(ctx context.Context, o linBenchOptions) (*linBenchReport, error) {
	const repTicks = lineage.DefaultRangeTicks
	cfg := broadside.DefaultConfig()
	cfg.Seed = o.seed
	rep := &linBenchReport{Quick: o.quick, Ships: o.ships, Sectors: cfg.Sectors(), RepTicks: repTicks, Cycles: o.cycles,
		MatchTicks: o.matchTicks, MatchMinutes: float64(o.matchTicks) / broadside.TickRate / 60, WhyDepth: o.depth, Store: "pebble"}
	if o.memoryStore {
		rep.Store = "memory"
	}
	// newStore opens a store (a Pebble one in a temporary directory).
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	newStore := func() (lineage.Store, error) {
		if o.memoryStore {
			return lineage.NewMemStore(), nil
		}
		dir, err := os.MkdirTemp("", "broadside-bench-lineage-")
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		s, err := lineage.OpenPebble(dir, lineage.PebbleOptions{Logger: quietLogger()})
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { s.Close() })
		return s, nil
	}
	newLog := func(background bool) (*lineage.Log, error) {
		s, err := newStore()
		if err != nil {
			return nil, err
		}
		if err := lineage.PutKindNames(ctx, s, linKindNames); err != nil {
			return nil, err
		}
		lg := lineage.NewLog(lineage.LogOptions{Store: s, RangeTicks: repTicks, Background: background})
		cleanup = append(cleanup, func() { lg.Close(ctx) })
		return lg, nil
	}
	newWorld := func() (*linBenchWorld, error) {
		w, err := broadside.NewWorld(cfg)
		if err != nil {
			return nil, err
		}
		for p := uint32(1); p <= uint32(o.ships); p++ {
			if err := w.SubmitCommand(p, broadside.Join()); err != nil {
				return nil, err
			}
		}
		return &linBenchWorld{w: w}, nil
	}

	// The planner is an untimed world on which the bots think; it records
	// the whole match (background sealing) for the Why measurement. The
	// three measured worlds replay its orders.
	plan, err := newWorld()
	if err != nil {
		return nil, err
	}
	if plan.logs[linRoleBackground], err = newLog(true); err != nil {
		return nil, err
	}
	matchLog := plan.logs[linRoleBackground]
	var worlds [linRoles]*linBenchWorld
	for i := range worlds {
		if worlds[i], err = newWorld(); err != nil {
			return nil, err
		}
		if worlds[i].logs[linRoleInline], err = newLog(false); err != nil {
			return nil, err
		}
		if worlds[i].logs[linRoleBackground], err = newLog(true); err != nil {
			return nil, err
		}
	}
	fleet := newLinFleet(uint32(o.ships), o.seed, true)
	var views []broadside.ShipView
	think := func(w *broadside.World, into []linOrder) []linOrder {
		views = views[:0]
		w.Ships(func(v broadside.ShipView) { views = append(views, v) })
		fleet.act(w.Tick(), views, func(p uint32, c broadside.PlayerCommand) { into = append(into, linOrder{p, c}) })
		return into
	}
	submit := func(b *linBenchWorld, orders []linOrder) {
		for _, x := range orders {
			_ = b.w.SubmitCommand(x.player, x.cmd)
		}
	}
	planTick := func(orders []linOrder) ([]linOrder, error) {
		if err := plan.stepOnce(ctx, linRoleBackground); err != nil {
			return orders, err
		}
		plan.step = plan.step[:0]
		orders = think(plan.w, orders[:0])
		submit(plan, orders)
		return orders, nil
	}
	// Thread CPU time (Linux) is read around each block.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, haveCPU := linThreadCPU()

	// Warm up to the start of a range window (tick 256), all worlds
	// recording (both logs' buffers grow to a range's size).
	fmt.Fprintf(o.progress, "bench lineage: %d ships, warming up ...\n", o.ships)
	var orders []linOrder
	for plan.w.Tick() < 2*repTicks-1 {
		if orders, err = planTick(orders); err != nil {
			return nil, err
		}
		for i, b := range worlds {
			role := linRoleInline + (i+int(plan.w.Tick())/repTicks)%2
			if err := b.stepOnce(ctx, role); err != nil {
				return nil, err
			}
			submit(b, orders)
		}
	}
	for _, b := range worlds {
		b.step = b.step[:0]
	}

	// Blocks of one range: the planner steps repTicks ticks and its bots
	// give orders; then the measured worlds step the same ticks with the
	// same orders, world i in role (i + block) mod 3, starting with a
	// different world each block.
	type blockTimes struct{ wall, cpu [linRoles]time.Duration }
	blocks := make([]blockTimes, 0, 3*o.cycles)
	var ticks [linRoles][]time.Duration
	var sealTicks []time.Duration
	var ballSum, ballN float64
	eventsBefore := plan.logs[linRoleBackground].Stats()
	ticksBefore := plan.w.Tick()
	script := make([][]linOrder, repTicks)
	for blk := 0; blk < 3*o.cycles; blk++ {
		for k := 0; k < repTicks; k++ {
			if script[k], err = planTick(script[k]); err != nil {
				return nil, err
			}
			if k%32 == 0 {
				ballSum += float64(plan.w.BallCount())
				ballN++
			}
		}
		var bt blockTimes
		var byRole [linRoles]*linBenchWorld
		for j := range worlds {
			i := (blk + j) % linRoles
			b, role := worlds[i], (i+blk)%linRoles
			byRole[role] = b
			b.step = b.step[:0]
			c0, _ := linThreadCPU()
			for k := 0; k < repTicks; k++ {
				if err := b.stepOnce(ctx, role); err != nil {
					return nil, err
				}
				submit(b, script[k])
			}
			c1, _ := linThreadCPU()
			bt.wall[role], bt.cpu[role] = linSum(b.step), c1-c0
			ticks[role] = append(ticks[role], b.step...)
		}
		for _, b := range worlds {
			if b.w.Hash() != plan.w.Hash() {
				return nil, fmt.Errorf("block %d: a measured world diverged from the planner", blk)
			}
		}
		// The inline world seals at the block's last tick: that tick's
		// excess over the no-op world's is the encoding.
		sealTicks = append(sealTicks, byRole[linRoleInline].step[repTicks-1]-byRole[linRoleNop].step[repTicks-1])
		blocks = append(blocks, bt)
		fmt.Fprintf(o.progress, "\rbench lineage: block %d/%d, ratio background %.4f inline %.4f", blk+1, 3*o.cycles,
			float64(bt.wall[linRoleBackground])/float64(bt.wall[linRoleNop]), float64(bt.wall[linRoleInline])/float64(bt.wall[linRoleNop]))
	}
	fmt.Fprintln(o.progress)
	eventsAfter := plan.logs[linRoleBackground].Stats()
	n := float64(plan.w.Tick() - ticksBefore)
	rep.EventsPerTick = float64(eventsAfter.Events-eventsBefore.Events) / n
	rep.InputsPerTick = float64(eventsAfter.Inputs-eventsBefore.Inputs) / n
	rep.BallsInAir = ballSum / max(ballN, 1)
	overhead := func(role int) linBenchOverhead {
		var cyc, cpuCyc, blk []float64
		var total, nopTotal time.Duration
		for c := 0; c < o.cycles; c++ {
			lw, lc := 0.0, 0.0
			for _, b := range blocks[3*c : 3*c+3] {
				r := float64(b.wall[role]) / float64(b.wall[linRoleNop])
				blk = append(blk, r)
				lw += math.Log(r)
				lc += math.Log(float64(b.cpu[role]) / float64(b.cpu[linRoleNop]))
				total, nopTotal = total+b.wall[role], nopTotal+b.wall[linRoleNop]
			}
			cyc = append(cyc, math.Exp(lw/3))
			cpuCyc = append(cpuCyc, math.Exp(lc/3))
		}
		slices.Sort(cyc)
		slices.Sort(cpuCyc)
		slices.Sort(blk)
		ov := linBenchOverhead{RatioMedian: linQuantile(cyc, 0.5), RatioP25: linQuantile(cyc, 0.25), RatioP75: linQuantile(cyc, 0.75),
			BlockRatioMedian: linQuantile(blk, 0.5), MeanRatio: float64(total) / float64(nopTotal), TickUs: linMedianUs(ticks[role])}
		ov.OverheadPct = 100 * (ov.RatioMedian - 1)
		if haveCPU {
			ov.CPUOverheadPct = 100 * (linQuantile(cpuCyc, 0.5) - 1)
		}
		return ov
	}
	rep.Background, rep.Inline = overhead(linRoleBackground), overhead(linRoleInline)
	rep.OverheadPct = rep.Background.OverheadPct
	rep.TickNopUs = linMedianUs(ticks[linRoleNop])
	rep.EncodeUsPerTick = linMedianUs(sealTicks) / repTicks
	for i := range worlds {
		for _, lg := range worlds[i].logs {
			if lg != nil {
				if err := lg.Close(ctx); err != nil {
					return nil, err
				}
			}
		}
		worlds[i] = nil
	}

	// The rest of the match, recorded by the planner only.
	for int(plan.w.Tick()) < o.matchTicks {
		if orders, err = planTick(orders); err != nil {
			return nil, err
		}
		if t := plan.w.Tick(); t%600 == 0 {
			fmt.Fprintf(o.progress, "\rbench lineage: match tick %d/%d", t, o.matchTicks)
		}
	}
	fmt.Fprintln(o.progress)
	if err := matchLog.Flush(ctx); err != nil {
		return nil, err
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	ix, err := lineage.LoadIndex(ctx, matchLog.Store())
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

	rng := rand.New(rand.NewPCG(o.seed, 0x11e))
	last := plan.w.Tick()
	depths := []int{2, o.depth, lineage.Unlimited}
	if o.depth == 2 || o.depth < 0 {
		depths = []int{2, lineage.Unlimited}
	}
	for _, depth := range depths {
		q := o.queries
		if depth == lineage.Unlimited {
			q = max(o.queries/10, 20)
		}
		lat := make([]time.Duration, 0, q)
		all := make([]time.Duration, 0, q)
		var causes, maxCauses int
		for i := 0; i < q; i++ {
			ship := broadside.ShipID(uint32(1 + rng.IntN(o.ships)))
			tick := 1 + rng.Uint64N(last)
			t0 := time.Now()
			r, err := ix.Why(lineage.AnyShard, ship, tick, depth)
			if err != nil {
				return nil, fmt.Errorf("why %s at %d: %w", linEntityName(ship), tick, err)
			}
			_ = r.Causes(100)
			lat = append(lat, time.Since(t0))
			t1 := time.Now()
			n := len(r.Causes(0))
			all = append(all, time.Since(t1))
			causes += n
			maxCauses = max(maxCauses, n)
		}
		slices.Sort(lat)
		slices.Sort(all)
		l := linBenchWhyLatency{Depth: depth, Queries: q, P50Us: linUs(linQuantileD(lat, 0.5)), P99Us: linUs(linQuantileD(lat, 0.99)),
			MaxUs: linUs(lat[len(lat)-1]), MeanCauses: float64(causes) / float64(q), MaxCauses: maxCauses,
			ListAllP99Us: linUs(linQuantileD(all, 0.99))}
		rep.Why = append(rep.Why, l)
		if depth == o.depth {
			rep.WhyP99Us, rep.WhyQueries = l.P99Us, q
		}
	}
	runtime.KeepAlive(ix)
	return rep, nil
}

// linThreadCPU returns the CPU time the calling OS thread has run (Linux:
// /proc/thread-self/schedstat, in ns); ok is false elsewhere.
func linThreadCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}

func linSum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// linQuantile returns the q-quantile of sorted s (nearest rank).
func linQuantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func linQuantileD(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func linMedianUs(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return linUs(linQuantileD(s, 0.5))
}

func linUs(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func linPrintBench(w io.Writer, r *linBenchReport) {
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	fmt.Fprintf(w, "broadside bench lineage (%s): %d ships, %d sectors, store %s\n\n", mode, r.Ships, r.Sectors, r.Store)
	fmt.Fprintf(w, "recording overhead: %d cycles of 3 blocks of %d ticks (one stored range); every block each of 3 worlds\n", r.Cycles, r.RepTicks)
	fmt.Fprintf(w, "steps the same ticks in another role (no-op, inline seal, background seal)\n")
	fmt.Fprintf(w, "  battle        %.0f lineage events, %.0f input records, %.0f cannonballs in the air per tick\n", r.EventsPerTick, r.InputsPerTick, r.BallsInAir)
	fmt.Fprintf(w, "  %-22s %11s %9s %9s %9s %12s %12s %10s %11s\n", "recorder", "tick p50 µs", "cycle p25", "median", "p75", "block median", "of totals", "overhead", "thread CPU")
	fmt.Fprintf(w, "  %-22s %11.0f\n", "lineage.Nop", r.TickNopUs)
	for _, x := range []struct {
		name string
		o    linBenchOverhead
	}{{"Log, background seal", r.Background}, {"Log, inline seal", r.Inline}} {
		fmt.Fprintf(w, "  %-22s %11.0f %9.4f %9.4f %9.4f %12.4f %12.4f %+9.2f%% %+10.2f%%\n", x.name, x.o.TickUs, x.o.RatioP25, x.o.RatioMedian,
			x.o.RatioP75, x.o.BlockRatioMedian, x.o.MeanRatio, x.o.OverheadPct, x.o.CPUOverheadPct)
	}
	fmt.Fprintf(w, "  overhead = median over cycles of the geometric-mean step-time ratio − 1 (target < 1%%); thread CPU =\n")
	fmt.Fprintf(w, "  the same with the tick loop thread's CPU time (not other processes, the sealer or GC workers).\n")
	fmt.Fprintf(w, "  Encoding and storing a range costs ≈ %.1f µs of CPU per tick: on the tick loop when sealing inline,\n", r.EncodeUsPerTick)
	fmt.Fprintf(w, "  on the Log's goroutine when sealing in the background.\n\n")
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
