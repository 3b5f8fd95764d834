package report

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

func TestDurationQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		got := Quantile(ds, c.q)
		if math.Abs(float64(got-c.want)) > 0.001*float64(c.want) {
			t.Errorf("Quantile(1..100 ms, %g) = %v, want %v within 0.1%%", c.q, got, c.want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
	d := NewDurations()
	d.Record(-time.Second)
	d.Record(2 * time.Hour)
	if d.Count() != 2 || d.Quantile(0) != 0 || d.Max() < time.Hour-time.Second {
		t.Errorf("clamping: count %d, min %v, max %v", d.Count(), d.Quantile(0), d.Max())
	}
}

func TestValueQuantile(t *testing.T) {
	ratios := []float64{1.01, 0.99, 1.0072, 1.02, 0.98}
	if got := ValueQuantile(ratios, 0.5, 1e-6); math.Abs(got-1.0072) > 1e-3 {
		t.Errorf("median ratio = %v, want 1.0072", got)
	}
	if got := ValueQuantile([]float64{7168, 1024, 3000}, 1, 1); math.Abs(got-7168) > 1 {
		t.Errorf("max = %v, want 7168", got)
	}
	if got := ValueQuantile(nil, 0.5, 1); got != 0 {
		t.Errorf("ValueQuantile(nil) = %v", got)
	}
}

func TestChartWritesPNG(t *testing.T) {
	var plots []*plot.Plot
	for range 2 {
		p := plot.New()
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 1}, {X: 1, Y: 2}})
		if err != nil {
			t.Fatal(err)
		}
		p.Add(l)
		plots = append(plots, p)
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := (Chart{Plots: plots}).WritePNG(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w <= h {
		t.Errorf("two panels side by side: %d × %d", w, h)
	}
	if err := (Chart{}).WritePNG(path); err == nil {
		t.Error("a chart without plots was written")
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		b    float64
		want string
	}{{512, "512 B"}, {1536, "1.5 KiB"}, {3 << 20, "3.00 MiB"}, {5 << 30, "5.00 GiB"}} {
		if got := Bytes(c.b); got != c.want {
			t.Errorf("Bytes(%v) = %q, want %q", c.b, got, c.want)
		}
	}
	if got := PlayTime(30*75+15, 30); got != "1:15.5" {
		t.Errorf("PlayTime = %q", got)
	}
}

// TestCPUByLabel: a profile of two labelled busy goroutines splits their
// CPU by label; the labelled total cannot exceed the profile's.
func TestCPUByLabel(t *testing.T) {
	p, err := StartCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	var sink atomic.Uint64
	spin := func(n int) { // CPU-bound work in proportion to n
		x := uint64(1)
		for range n * 50_000_000 {
			x = x*31 + 7
		}
		sink.Add(x)
	}
	done := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("component", "a"), func(context.Context) { spin(4); done <- struct{}{} })
	go pprof.Do(context.Background(), pprof.Labels("component", "b"), func(context.Context) { spin(1); done <- struct{}{} })
	<-done
	<-done
	by, err := p.Stop("component")
	if err != nil {
		t.Fatal(err)
	}
	if by["a"] <= 0 || by["b"] <= 0 {
		t.Fatalf("no samples for a labelled goroutine: %v", by)
	}
	if by["a"] < by["b"] {
		t.Fatalf("a spun 4x longer than b but got less CPU: %v", by)
	}
	if _, err := CPUByLabel([]byte("not a profile"), "component"); err == nil {
		t.Fatal("garbage parsed as a profile")
	}
}
