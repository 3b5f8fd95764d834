package report

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart is a row of plots (gonum/plot) drawn side by side, aligned, as one
// PNG image: every benchmark's --png.
type Chart struct {
	Plots []*plot.Plot
	// PanelWidth and PanelHeight are the size of each plot (zero: 7 × 5
	// inches).
	PanelWidth, PanelHeight vg.Length
	// Header, if set, draws on a strip HeaderHeight high above the plots
	// (for example one legend shared by all of them).
	Header       func(strip draw.Canvas)
	HeaderHeight vg.Length
}

// WritePNG draws the chart on a white background and writes it to path.
func (c Chart) WritePNG(path string) error {
	if len(c.Plots) == 0 {
		return fmt.Errorf("png %s: no plot", path)
	}
	w, h := c.PanelWidth, c.PanelHeight
	if w == 0 || h == 0 {
		w, h = 7*vg.Inch, 5*vg.Inch
	}
	img := vgimg.New(w*vg.Length(len(c.Plots)), h+c.HeaderHeight)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if c.Header != nil {
		c.Header(draw.Crop(dc, 0, 0, h, 0))
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(c.Plots), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{c.Plots}, tiles, draw.Crop(dc, 0, 0, 0, -c.HeaderHeight))
	for i, p := range c.Plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("png %s: %w", path, err)
	}
	return f.Close()
}
