package logbench

import (
	"testing"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestScratch(t *testing.T) {
	_ = hdr.New(1, 10, 3)
	_ = jetstream.MemoryStorage
	_ = mpb.New()
	_ = decor.Name("x")
	_ = plot.New()
	_ = plotter.XYs{}
	_ = vg.Inch
	_ = draw.Canvas{}
	_ = vgimg.New(1, 1)
}
