package bots

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"

	"github.com/anoptic/broadside/internal/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteSummary writes what 'broadside bots' prints after its run: the
// load (with the bots' behaviour), WriteText's lines and the errors by
// kind.
func (rep Report) WriteSummary(out io.Writer, behaviour string) {
	fmt.Fprintf(out, "bots:        %d x %.0f commands/s for %.1fs (%s)\n", rep.Bots, rep.RatePerBot, rep.DurationSec, behaviour)
	rep.WriteText(out)
	if len(rep.Errors) == 0 {
		fmt.Fprintf(out, "errors:      none\n")
	}
	for _, k := range rep.ErrorKinds() {
		if first, ok := rep.FirstErrors[k]; ok {
			fmt.Fprintf(out, "errors:      %s: %d (first: %s)\n", k, rep.Errors[k], first)
			continue
		}
		fmt.Fprintf(out, "errors:      %s: %d\n", k, rep.Errors[k])
	}
}

// WriteProgress writes s as one line of a progress display (a carriage
// return first, so each overwrites the last).
func (s Snapshot) WriteProgress(w io.Writer) {
	fmt.Fprintf(w, "\r%6s  %d bots  sent %d  durable %d  replicated %d  applied %d  ack p50 %dus p99 %dus  applied p99 %dms   ",
		s.Elapsed, s.Connected, s.Sent, s.Durable, s.Replicated, s.Applied, s.P50us, s.P99us, s.AppliedP99us/1000)
}

// WriteJSONFile writes the report as indented JSON to file.
func (rep Report) WriteJSONFile(file string) error {
	b, _ := json.MarshalIndent(rep, "", "  ")
	return os.WriteFile(file, b, 0o644)
}

// WritePNG draws the report's ack and applied latency over time into a
// PNG chart at file.
func (rep Report) WritePNG(file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d bots x %.0f cmd/s: command to ack (%s) and to applied", rep.Bots, rep.RatePerBot, rep.AckStatus)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "latency (µs)"
	p50, p99, app := make(plotter.XYs, len(rep.Timeline)), make(plotter.XYs, len(rep.Timeline)), make(plotter.XYs, len(rep.Timeline))
	for i, s := range rep.Timeline {
		p50[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.P50us)}
		p99[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.P99us)}
		app[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.AppliedP99us)}
	}
	l50, err := plotter.NewLine(p50)
	if err != nil {
		return err
	}
	l99, err := plotter.NewLine(p99)
	if err != nil {
		return err
	}
	l99.Color = color.RGBA{R: 200, A: 255}
	lapp, err := plotter.NewLine(app)
	if err != nil {
		return err
	}
	lapp.Color = color.RGBA{B: 200, A: 255}
	p.Add(l50, l99, lapp)
	p.Legend.Add("ack p50", l50)
	p.Legend.Add("ack p99", l99)
	p.Legend.Add("applied p99", lapp)
	return report.Chart{Plots: []*plot.Plot{p}, PanelWidth: 8 * vg.Inch, PanelHeight: 4 * vg.Inch}.WritePNG(file)
}
