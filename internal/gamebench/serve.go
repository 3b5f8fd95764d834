package gamebench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/logbench"
	"github.com/anoptic/broadside/internal/report"
)

// ServeContender is one game-server configuration `bench serve` runs.
type ServeContender struct {
	Name string
	// What it is, for the table's legend.
	What       string
	Durability seq.Durability
}

// ServeContenders are the configurations `bench serve` knows, the
// reference (the ratios' denominator) first.
var ServeContenders = []ServeContender{
	{Name: "memory", What: "embedded log, replicas acknowledge from memory ('replicated')", Durability: seq.Memory},
	{Name: "fsync", What: "embedded log, replicas acknowledge after their WAL fsync ('durable', serve's default)", Durability: seq.Fsync},
}

// ServeConfig configures RunServe (`broadside bench serve`).
type ServeConfig struct {
	// Game is the world ('serve''s default world).
	Game broadside.Config
	// Contenders names the contenders to run, in ServeContenders' order
	// (nil: all).
	Contenders []string
	// Bots are the bot counts; each contender runs with each.
	Bots []int
	// Rate is the commands per second each bot sends; Duration how long
	// each run lasts.
	Rate     float64
	Duration time.Duration
	// Dir is the parent of the data directories ("": the system's
	// temporary directory); they are removed afterwards.
	Dir string
	// ProfileDir, if set, receives each run's CPU profile as
	// serve-CONTENDER-BOTS.pprof (for go tool pprof; the label "component"
	// splits it).
	ProfileDir string
	// AckHold is the server's (server.Config.AckHold; serve --ack-hold).
	AckHold time.Duration
	// AcksInState is the server's (server.Config.AcksInState; serve
	// --acks-in-state).
	AcksInState bool
	Output
}

// serveResult is one contender with one bot count.
type serveResult struct {
	Contender   string  `json:"contender"`
	Bots        int     `json:"bots"`
	Sent        int64   `json:"sent"`
	Acked       int64   `json:"acked"`
	Applied     int64   `json:"applied"`
	Skipped     int64   `json:"skipped_window_full"`
	Errors      int64   `json:"errors"`
	AckP50us    int64   `json:"ack_p50_us"`
	AckP99us    int64   `json:"ack_p99_us"`
	AckP999us   int64   `json:"ack_p999_us"`
	AppliedP50  int64   `json:"applied_p50_us"`
	AppliedP99  int64   `json:"applied_p99_us"`
	TicksPerSec float64 `json:"ticks_per_sec"`
	// Overruns counts the tick periods the world lost during the run
	// (broadside_world_tick_overruns_total); UpdatesPerSec is the state
	// updates each bot applied per second.
	Overruns      int64   `json:"tick_overruns"`
	UpdatesPerSec float64 `json:"updates_per_sec_per_client"`
	// Cores is the process's CPU (server, log, world and the bots: one
	// process) over the run, in cores; CPUPerCmdUs per command sent.
	Cores       float64 `json:"cores"`
	CPUPerCmdUs float64 `json:"cpu_per_command_us"`
	// ServerCores is the process's CPU less the bots' (from the CPU
	// profile's component labels), in cores; BotCores the bots'.
	ServerCores float64 `json:"server_cores"`
	BotCores    float64 `json:"bot_cores"`
	// PerPlayerTickUs is the server's CPU per player-tick (bots × world
	// ticks) by component: the pprof label "component" of the goroutines
	// (log, intake, fan-out, sim, quic; "other" for the runtime's own
	// goroutines, the garbage collector's among them).
	PerPlayerTickUs map[string]float64 `json:"cpu_per_player_tick_us"`
	// PacketsUp and PacketsDown are the QUIC packets (UDP datagrams after
	// the handshake) per player-tick the bots sent and received (the
	// bots' connection statistics over bots × world ticks);
	// BotMsPerBotSec is the bots' CPU per bot-second, ms.
	PacketsUp      float64 `json:"packets_up_per_player_tick"`
	PacketsDown    float64 `json:"packets_down_per_player_tick"`
	BotMsPerBotSec float64 `json:"bot_cpu_ms_per_bot_second"`
	// AcksInState is the share of acknowledgements that came inside
	// state updates (the rest on the stream).
	AcksInState float64 `json:"acks_in_state_share"`
	// The state updates the server built during the run
	// (broadside_server_state_update_bytes and state_updates_total): how
	// many, their mean size, the shares of at most 1,200 bytes (a datagram
	// at any packet size) and of at most 1,400 (a datagram once path MTU
	// discovery reached 1,452-byte packets), and the share sent as
	// datagrams (the rest went on the stream, or were replaced before
	// they were sent).
	StateUpdates      uint64  `json:"state_updates"`
	StateBytesMean    float64 `json:"state_update_bytes_mean"`
	StateUpTo1200     float64 `json:"state_updates_share_le_1200"`
	StateUpTo1400     float64 `json:"state_updates_share_le_1400"`
	StateDatagramSent float64 `json:"state_updates_share_datagram_sent"`
	StateFull         float64 `json:"state_updates_share_full"`
	Err               string  `json:"error,omitempty"`
}

// serverComponents are the component labels in the order the table shows.
var serverComponents = []string{"log", "intake", "fan-out", "sim", "quic", "other"}

// RunServe runs a game server and bots in this process for each bot
// count and contender, side by side in one run (the contenders' order
// alternates from one bot count to the next, so that drifting load on the
// machine weighs on both), and writes the table to out and the JSON file
// the config names.
func RunServe(ctx context.Context, cfg ServeConfig, out io.Writer) error {
	cfg.Output = cfg.Output.withDefaults()
	contenders, err := selectServeContenders(cfg.Contenders)
	if err != nil {
		return err
	}
	if len(cfg.Bots) == 0 || cfg.Rate <= 0 || cfg.Duration <= 0 {
		return fmt.Errorf("bench serve: need bot counts, a rate and a duration")
	}
	load := startLoadMeter()
	started := time.Now()
	var results []serveResult
	for i, n := range cfg.Bots {
		order := contenders
		if i%2 == 1 {
			order = reversed(contenders)
		}
		for _, c := range order {
			fmt.Fprintf(cfg.Progress, "serve: %s, %d bots at %.0f commands/s for %v\n", c.Name, n, cfg.Rate, cfg.Duration)
			r, err := runServeOnce(ctx, cfg, c, n)
			if err != nil {
				r.Err = err.Error()
				fmt.Fprintf(cfg.Progress, "serve: %s, %d bots: %v\n", c.Name, n, err)
			}
			results = append(results, r)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runtime.GC()
		}
	}
	busy := load.stop()
	fmt.Fprintf(out, "machine: %s\nrun: %s, %s; %s\n", logbench.MachineDescription(), started.UTC().Format(time.RFC3339),
		time.Since(started).Round(time.Second), busy)
	writeServeTable(out, cfg, contenders, results)
	return cfg.writeJSON(struct {
		RatePerBot  float64       `json:"rate_per_bot"`
		DurationSec float64       `json:"duration_s"`
		Results     []serveResult `json:"results"`
	}{cfg.Rate, cfg.Duration.Seconds(), results})
}

func selectServeContenders(names []string) ([]ServeContender, error) {
	if len(names) == 0 {
		return ServeContenders, nil
	}
	var out []ServeContender
	for _, c := range ServeContenders {
		for _, n := range names {
			if strings.TrimSpace(n) == c.Name {
				out = append(out, c)
			}
		}
	}
	if len(out) != len(names) {
		var known []string
		for _, c := range ServeContenders {
			known = append(known, c.Name)
		}
		return nil, fmt.Errorf("bench serve: contenders %v: known are %s", names, strings.Join(known, ", "))
	}
	return out, nil
}

func reversed(cs []ServeContender) []ServeContender {
	out := make([]ServeContender, len(cs))
	for i, c := range cs {
		out[len(cs)-1-i] = c
	}
	return out
}

// runServeOnce starts a fresh server of contender c, runs n bots against
// it for the configured duration, and stops it.
func runServeOnce(ctx context.Context, cfg ServeConfig, c ServeContender, n int) (serveResult, error) {
	res := serveResult{Contender: c.Name, Bots: n}
	dir, err := os.MkdirTemp(cfg.Dir, "broadside-bench-serve-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	game, err := broadside.NewGame(cfg.Game, 600_000)
	if err != nil {
		return res, err
	}
	cr, err := newCredentials()
	if err != nil {
		return res, err
	}
	g, err := startGameServer(ctx, gameServerConfig{Dir: dir, Durability: c.Durability, Game: game, Players: cr, Logger: cfg.Logger, AckHold: cfg.AckHold, AcksInState: cfg.AcksInState})
	if err != nil {
		return res, err
	}
	prof, err := report.StartCPUProfile()
	if err != nil {
		g.stop(ctx)
		return res, err
	}
	tick0, cpu0, t0, over0 := g.world.Tick(), report.ProcessCPU(), time.Now(), g.counter("broadside_world_tick_overruns_total")
	upd0, sum0, cum0 := g.histogram("broadside_server_state_update_bytes")
	dgramSent := func() float64 {
		return g.counterWhere("broadside_server_state_updates_total", map[string]string{"path": "datagram", "kind": "delta"}) +
			g.counterWhere("broadside_server_state_updates_total", map[string]string{"path": "datagram", "kind": "full"})
	}
	dgram0 := dgramSent()
	fulls := func() float64 {
		return g.counterWhere("broadside_server_state_updates_total", map[string]string{"kind": "full"})
	}
	full0 := fulls()
	var rep bots.Report
	// The bots' goroutines (and their QUIC connections) are labelled
	// component=bots, so the profile tells their CPU from the server's.
	pprof.Do(ctx, pprof.Labels("component", "bots"), func(ctx context.Context) {
		rep, err = bots.Run(ctx, bots.Config{Server: g.Addr(), TLS: cr.ca.ClientTLS(), Secret: cr.secret, N: n, Rate: cfg.Rate,
			Duration: cfg.Duration, Behaviour: bots.Captain, Seed: 1})
	})
	elapsed, cpu, ticks := time.Since(t0), report.ProcessCPU()-cpu0, g.world.Tick()-tick0
	res.Overruns = int64(g.counter("broadside_world_tick_overruns_total") - over0)
	if upd, sum, cum := g.histogram("broadside_server_state_update_bytes"); upd > upd0 {
		n := float64(upd - upd0)
		res.StateUpdates, res.StateBytesMean = upd-upd0, (sum-sum0)/n
		res.StateUpTo1200, res.StateUpTo1400 = float64(cum[1200]-cum0[1200])/n, float64(cum[1400]-cum0[1400])/n
		// The datagram path's delta and full counters count datagrams
		// sent; its dropped ones were replaced or refused.
		res.StateDatagramSent = (dgramSent() - dgram0) / n
		res.StateFull = (fulls() - full0) / n
	}
	byComponent, perr := prof.Stop("component")
	if cfg.ProfileDir != "" {
		name := filepath.Join(cfg.ProfileDir, fmt.Sprintf("serve-%s-%d.pprof", c.Name, n))
		if werr := os.WriteFile(name, prof.Bytes(), 0o644); werr != nil && err == nil {
			err = fmt.Errorf("profile: %w", werr)
		}
	}
	if perr == nil {
		res.setComponents(byComponent, elapsed, uint64(n)*ticks)
	}
	if serr := g.stop(ctx); err == nil && serr != nil {
		err = fmt.Errorf("stop: %w", serr)
	}
	res.Sent, res.Acked, res.Applied, res.Skipped = rep.Sent, rep.Acked, rep.Applied, rep.Skipped
	for _, e := range rep.Errors {
		res.Errors += e
	}
	res.AckP50us, res.AckP99us, res.AckP999us = rep.AckP50us, rep.AckP99us, rep.AckP999us
	res.AppliedP50, res.AppliedP99 = rep.AppliedP50us, rep.AppliedP99us
	res.TicksPerSec = float64(ticks) / elapsed.Seconds()
	res.UpdatesPerSec = rep.UpdatesPerSec
	if res.TicksPerSec > 0 {
		res.PacketsUp, res.PacketsDown = rep.UpPacketsPerSec/res.TicksPerSec, rep.DownPacketsPerSec/res.TicksPerSec
	}
	if n > 0 {
		res.BotMsPerBotSec = res.BotCores * 1000 / float64(n)
	}
	if rep.Acked > 0 {
		res.AcksInState = float64(rep.AckedInState) / float64(rep.Acked)
	}
	res.Cores = float64(cpu) / float64(elapsed)
	if rep.Sent > 0 {
		res.CPUPerCmdUs = float64(cpu.Microseconds()) / float64(rep.Sent)
	}
	return res, err
}

// setComponents fills the CPU split from a profile's label sums.
func (r *serveResult) setComponents(by map[string]time.Duration, elapsed time.Duration, playerTicks uint64) {
	var server time.Duration
	r.PerPlayerTickUs = map[string]float64{}
	for label, d := range by {
		if label == "bots" {
			r.BotCores = float64(d) / float64(elapsed)
			continue
		}
		if label == "" {
			label = "other"
		}
		server += d
		if playerTicks > 0 {
			r.PerPlayerTickUs[label] += float64(d.Microseconds()) / float64(playerTicks)
		}
	}
	r.ServerCores = float64(server) / float64(elapsed)
}

func writeServeTable(out io.Writer, cfg ServeConfig, contenders []ServeContender, results []serveResult) {
	fmt.Fprintf(out, "\nGame server with bots (captain), %.0f commands/s per bot, %v per run, one process on 127.0.0.1\n", cfg.Rate, cfg.Duration)
	for _, c := range contenders {
		fmt.Fprintf(out, "  %-8s %s\n", c.Name, c.What)
	}
	fmt.Fprintf(out, "Latencies in ms (HdrHistogram): ack = command sent to its acknowledgement, applied = to the state update\n")
	fmt.Fprintf(out, "showing it applied; cores and cpu/cmd are the whole process's (server, log, world and bots);\n")
	fmt.Fprintf(out, "ratios against %s with the same bots (higher is slower / costlier)\n", contenders[0].Name)
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tbots\tacked\tack p50\tack p99\tack p99.9\tapplied p50\tapplied p99\tticks/s\toverruns\tupdates/s\tcores\tcpu/cmd µs\tp50 x\tp99 x\tapplied p99 x\tcpu x\t\n")
	ref := map[int]serveResult{}
	for _, r := range results {
		if r.Contender == contenders[0].Name {
			ref[r.Bots] = r
		}
	}
	ms := func(us int64) string { return fmt.Sprintf("%.2f", float64(us)/1000) }
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	var late []string
	for _, n := range cfg.Bots {
		for _, c := range contenders {
			for _, r := range results {
				if r.Bots != n || r.Contender != c.Name {
					continue
				}
				if r.Err != "" && r.Sent == 0 {
					fmt.Fprintf(tw, "%s\t%d\tfailed: %s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Contender, r.Bots, r.Err)
					continue
				}
				if r.Err != "" {
					// Measured, then failed (a server that did not drain in
					// time): the figures stand, with the failure below.
					late = append(late, fmt.Sprintf("%s/%d bots (row marked *): %s", r.Contender, r.Bots, r.Err))
				}
				b := ref[n]
				mark := ""
				if r.Err != "" {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t%d\t%.1f\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Contender, mark, r.Bots, r.Acked,
					ms(r.AckP50us), ms(r.AckP99us), ms(r.AckP999us), ms(r.AppliedP50), ms(r.AppliedP99), r.TicksPerSec, r.Overruns, r.UpdatesPerSec, r.Cores, r.CPUPerCmdUs,
					ratio(float64(r.AckP50us), float64(b.AckP50us)), ratio(float64(r.AckP99us), float64(b.AckP99us)),
					ratio(float64(r.AppliedP99), float64(b.AppliedP99)), ratio(r.CPUPerCmdUs, b.CPUPerCmdUs))
			}
		}
	}
	tw.Flush()
	for _, l := range late {
		fmt.Fprintf(out, "failed after measuring: %s\n", l)
	}
	fmt.Fprintf(out, "\nServer CPU (the process less the bots, from the CPU profile's goroutine labels), and per\n")
	fmt.Fprintf(out, "player-tick (bots × world ticks) by component, µs: log = the embedded command log; intake =\n")
	fmt.Fprintf(out, "sessions, reading and checking commands; fan-out = state updates and acknowledgements; sim = the\n")
	fmt.Fprintf(out, "world's Runners, snapshots and Ticker; quic = the players' QUIC connections; other = the runtime (GC);\n")
	fmt.Fprintf(out, "pkts up/down = QUIC packets per player-tick the bots sent/received; bot ms/bot-s = the bots' CPU per bot-second;\n")
	fmt.Fprintf(out, "acks in state = the share of acknowledgements that came inside state datagrams (--ack-hold)\n")
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tbots\tserver cores\tbot cores\t%s\ttotal\tpkts up\tpkts down\tbot ms/bot-s\tacks in state\t\n", strings.Join(serverComponents, "\t"))
	for _, n := range cfg.Bots {
		for _, c := range contenders {
			for _, r := range results {
				if r.Bots != n || r.Contender != c.Name || r.PerPlayerTickUs == nil {
					continue
				}
				var cells []string
				total := 0.0
				for _, k := range serverComponents {
					cells = append(cells, fmt.Sprintf("%.1f", r.PerPlayerTickUs[k]))
					total += r.PerPlayerTickUs[k]
				}
				fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.0f%%\t\n", r.Contender, r.Bots, r.ServerCores, r.BotCores, strings.Join(cells, "\t"), total,
					r.PacketsUp, r.PacketsDown, r.BotMsPerBotSec, 100*r.AcksInState)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "\nState updates the server built: their mean size, the shares of at most 1,200 bytes (a datagram\n")
	fmt.Fprintf(out, "at any packet size) and 1,400 (a datagram at 1,452-byte packets), the share sent as datagrams, and the\n")
	fmt.Fprintf(out, "share of full states (no base the client acknowledged recently enough)\n")
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tbots\tupdates\tmean bytes\t≤ 1200\t≤ 1400\tas datagrams\tfull\t\n")
	for _, n := range cfg.Bots {
		for _, c := range contenders {
			for _, r := range results {
				if r.Bots != n || r.Contender != c.Name || r.StateUpdates == 0 {
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t\n", r.Contender, r.Bots, r.StateUpdates, r.StateBytesMean,
					100*r.StateUpTo1200, 100*r.StateUpTo1400, 100*r.StateDatagramSent, 100*r.StateFull)
			}
		}
	}
	tw.Flush()
	var failed []string
	for _, r := range results {
		if r.Errors > 0 || r.Sent != r.Acked {
			failed = append(failed, fmt.Sprintf("%s/%d bots: %d sent, %d acked, %d errors", r.Contender, r.Bots, r.Sent, r.Acked, r.Errors))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "not every command acknowledged: %s\n", strings.Join(failed, "; "))
	}
}
