package logbench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// reference returns the reference contender's result at size, if any.
func (r *Report) reference(size int) (Result, bool) {
	for _, res := range r.Results {
		if res.Name == Reference && res.RecordBytes == size && res.Err == nil {
			return res, true
		}
	}
	return Result{}, false
}

func ratio(x, ref float64) string {
	if ref <= 0 || x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", x/ref)
}

func formatCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtUs(d time.Duration) string {
	v := us(d)
	if v >= 10_000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// WriteTable writes the human-readable report: the headline table (one
// row per contender and size, 1-appender latencies, highest sustained
// rate, ratios against lazylog-memory), the 8-appender latencies, and
// every open-loop step.
func (r *Report) WriteTable(w io.Writer) error {
	o := r.Options
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	fmt.Fprintf(w, "run: %s, %v", r.Started.Format(time.RFC3339), r.Duration.Round(time.Second))
	if r.MachineCores > 0 {
		fmt.Fprintf(w, "; cores busy on average: %.2f in all, %.2f in this process, %.2f elsewhere (other load competing)",
			r.MachineCores, r.OwnCores, max(r.MachineCores-r.OwnCores, 0))
	}
	fmt.Fprint(w, "\n\n")
	if len(o.ClosedLoop) > 0 {
		fmt.Fprintf(w, "Append latency, closed loop, %d appender(s), %d appends (µs), with the process's CPU time per append (µs);\n"+
			"max sustained appends/s (open loop: p99 < %v, ≥ %.0f%% of the target rate, background work keeping up);\n"+
			"ratios against %s (latency ×: higher is slower; ops ×: higher is more)\n",
			o.ClosedLoop[0].Appenders, o.ClosedLoop[0].Ops, o.P99Bound, 100*o.MinAchieved, Reference)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tbytes\tmean\tp50\tp99\tp99.9\tcpu/append\tmax ops/s\tmean ×\tp99 ×\tops ×\t")
	for _, res := range r.Results {
		if res.Err != nil && len(res.Closed) == 0 {
			fmt.Fprintf(tw, "%s\t%d\tfailed\t-\t-\t-\t-\t-\t-\t-\t-\t\n", res.Name, res.RecordBytes)
			continue
		}
		h := res.Headline()
		ref, ok := r.reference(res.RecordBytes)
		mean, p99, ops := "-", "-", "-"
		if ok {
			mean, p99, ops = ratio(us(h.Mean), us(ref.Headline().Mean)), ratio(us(h.P99), us(ref.Headline().P99)), ratio(res.MaxOps, ref.MaxOps)
		}
		maxOps := formatCount(res.MaxOps)
		if res.MaxOps == 0 && len(o.Rates) > 0 {
			maxOps = "<" + formatCount(o.Rates[0])
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", res.Name, res.RecordBytes,
			fmtUs(h.Mean), fmtUs(h.P50), fmtUs(h.P99), fmtUs(h.P999), fmtUs(h.CPUPerOp), maxOps, mean, p99, ops)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, ph := range o.ClosedLoop[min(1, len(o.ClosedLoop)):] {
		fmt.Fprintf(w, "\nClosed loop, %d appenders, %d appends (µs)\n", ph.Appenders, ph.Ops)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "contender\tbytes\tmean\tp50\tp99\tp99.9\tappends/s\tcpu µs/append\t")
		for _, res := range r.Results {
			if len(res.Closed) <= i+1 {
				continue
			}
			s := res.Closed[i+1]
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", res.Name, res.RecordBytes,
				fmtUs(s.Mean), fmtUs(s.P50), fmtUs(s.P99), fmtUs(s.P999), formatCount(s.OpsPerSec), fmtUs(s.CPUPerOp))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nOpen loop, %v per rate (latency from the scheduled send time, µs; settle: time for background work to catch up after the step)\n", o.StepDuration)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tbytes\ttarget/s\tachieved/s\tp50\tp99\tp99.9\tsettle ms\tcpu µs/append\tsustained\t")
	for _, res := range r.Results {
		for _, s := range res.Steps {
			verdict := "yes"
			if !s.Sustained {
				verdict = "no: " + s.Why
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t\n", res.Name, res.RecordBytes,
				formatCount(s.Target), formatCount(s.OpsPerSec), fmtUs(s.P50), fmtUs(s.P99), fmtUs(s.P999),
				float64(s.Settle)/float64(time.Millisecond), fmtUs(s.CPUPerOp), verdict)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, res := range r.Results {
		if res.Diagnostics != "" {
			if first {
				fmt.Fprintln(w)
				first = false
			}
			fmt.Fprintf(w, "%s after %d B: %s\n", res.Name, res.RecordBytes, res.Diagnostics)
		}
	}
	for _, res := range r.Results {
		if res.Err != nil {
			fmt.Fprintf(w, "\n%s (%d B) failed: %v\n", res.Name, res.RecordBytes, res.Err)
		}
	}
	return nil
}

// JSONContender is one row of the machine-readable report.
type JSONContender struct {
	Name        string  `json:"name"`
	RecordBytes int     `json:"record_bytes"`
	MeanUs      float64 `json:"mean_us"`
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	P999Us      float64 `json:"p999_us"`
	MaxOps      float64 `json:"max_ops"`
}

// JSONReport is the machine-readable report: one row per contender and
// record size, latencies of the 1-appender closed loop, and the highest
// sustained open-loop rate.
type JSONReport struct {
	Contenders []JSONContender `json:"contenders"`
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// JSON returns the machine-readable report. Failed contenders appear with
// zeros.
func (r *Report) JSON() JSONReport {
	out := JSONReport{Contenders: []JSONContender{}}
	for _, res := range r.Results {
		h := res.Headline()
		out.Contenders = append(out.Contenders, JSONContender{
			Name: res.Name, RecordBytes: res.RecordBytes,
			MeanUs: round1(us(h.Mean)), P50Us: round1(us(h.P50)), P99Us: round1(us(h.P99)), P999Us: round1(us(h.P999)),
			MaxOps: math.Round(res.MaxOps),
		})
	}
	return out
}

// WriteJSONFile writes the JSON report to path.
func (r *Report) WriteJSONFile(path string) error {
	return report.WriteJSONFile(path, r.JSON())
}

// WritePNGFile draws latency (p50 solid, p99 dashed) against achieved
// throughput for every contender, one panel per record size, both axes
// logarithmic, with one legend for all panels, and writes it to path as a
// PNG.
func (r *Report) WritePNGFile(path string) error {
	sizes := r.Options.Sizes
	if len(sizes) == 0 {
		return fmt.Errorf("logbench: png: no record sizes")
	}
	var names []string
	for _, res := range r.Results {
		if !slices.Contains(names, res.Name) {
			names = append(names, res.Name)
		}
	}
	style := func(ci int, dashed bool) (*plotter.Line, *plotter.Scatter) {
		l := &plotter.Line{LineStyle: draw.LineStyle{Color: plotutil.Color(ci), Width: vg.Points(1.5)}}
		if dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		pts := &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: plotutil.Color(ci), Radius: vg.Points(3), Shape: plotutil.Shape(ci)}}
		return l, pts
	}
	row := make([]*plot.Plot, len(sizes))
	for i, size := range sizes {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%d-byte records: append latency vs achieved throughput (open loop)", size)
		p.X.Label.Text = "achieved appends/s"
		p.Y.Label.Text = "latency (p50 solid, p99 dashed)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker = logTicks{label: func(v float64) string { return formatCount(v) }}
		p.Y.Tick.Marker = logTicks{label: formatLatencyUs}
		p.Add(plotter.NewGrid())
		drawn := 0
		for ci, name := range names {
			var p50, p99 plotter.XYs
			for _, res := range r.Results {
				if res.Name != name || res.RecordBytes != size {
					continue
				}
				for _, s := range res.Steps {
					if s.OpsPerSec <= 0 || s.P50 <= 0 {
						continue
					}
					p50 = append(p50, plotter.XY{X: s.OpsPerSec, Y: us(s.P50)})
					p99 = append(p99, plotter.XY{X: s.OpsPerSec, Y: us(s.P99)})
				}
			}
			if len(p50) == 0 {
				continue
			}
			for k, xys := range []plotter.XYs{p50, p99} {
				l, pts := style(ci, k == 1)
				l.XYs, pts.XYs = xys, xys
				p.Add(l, pts)
			}
			drawn++
		}
		if drawn == 0 {
			p.Title.Text += ": no data"
			p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 1e3, 1e5, 1e2, 1e5
		}
		row[i] = p
	}

	// The legend, above the panels: contenders in columns of two, then
	// the line styles.
	legend := func(strip draw.Canvas) {
		strip = draw.Crop(strip, vg.Millimeter*6, 0, 0, -vg.Millimeter*2)
		cols := (len(names)+1)/2 + 1
		colW := (strip.Max.X - strip.Min.X) / vg.Length(cols)
		for c := range cols {
			lg := plot.NewLegend()
			lg.Top, lg.Left = true, true
			lg.ThumbnailWidth = vg.Points(24)
			if c < cols-1 {
				for ci := 2 * c; ci < min(2*c+2, len(names)); ci++ {
					l, pts := style(ci, false)
					lg.Add(names[ci], l, pts)
				}
			} else {
				solid, _ := style(0, false)
				dashed, _ := style(0, true)
				solid.Color, dashed.Color = color.Gray{Y: 80}, color.Gray{Y: 80}
				lg.Add("p50", solid)
				lg.Add("p99", dashed)
			}
			lg.Draw(draw.Crop(strip, colW*vg.Length(c), -(colW * vg.Length(cols-c-1)), 0, 0))
		}
	}
	if err := (report.Chart{Plots: row, Header: legend, HeaderHeight: 0.7 * vg.Inch}).WritePNG(path); err != nil {
		return fmt.Errorf("logbench: %w", err)
	}
	return nil
}

// logTicks marks a logarithmic axis at 1, 2 and 5 times powers of ten
// (labelled) and the other integers times powers of ten (unlabelled).
type logTicks struct{ label func(float64) string }

func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				tk.Label = t.label(v)
			}
			ticks = append(ticks, tk)
		}
	}
	return ticks
}

// formatLatencyUs labels a latency given in microseconds.
func formatLatencyUs(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gms", v/1e3)
	}
	return fmt.Sprintf("%gµs", v)
}
