package report

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Progress shows a long operation's progress on a terminal (an mpb bar)
// or as a line every few seconds elsewhere, in ticks or in log positions.
type Progress struct {
	w        io.Writer
	what     string
	total    uint64
	inPos    bool
	p        *mpb.Progress
	bar      *mpb.Bar
	tick     atomic.Uint64
	off      bool
	start    time.Time
	lastLine atomic.Int64
}

// NewProgress starts showing the progress of what (total units: log
// positions if inPos, else ticks) on w; off shows nothing.
func NewProgress(w io.Writer, what string, total uint64, inPos, off bool) *Progress {
	rp := &Progress{w: w, what: what, total: total, inPos: inPos, off: off, start: time.Now()}
	if off {
		return rp
	}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			unit := "ticks"
			if inPos {
				unit = "log positions"
			}
			rp.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
			rp.bar = rp.p.AddBar(int64(total),
				mpb.PrependDecorators(decor.Name(what+" ", decor.WC{}), decor.CountersNoUnit("%d/%d "+unit, decor.WCSyncWidth)),
				mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5}), decor.Name(" "), decor.Elapsed(decor.ET_STYLE_MMSS, decor.WC{}),
					decor.Any(func(decor.Statistics) string { return fmt.Sprintf("  tick %d", rp.tick.Load()) })))
		}
	}
	return rp
}

// Set reports progress: done units (of total) and the current tick.
func (rp *Progress) Set(done, tick uint64) {
	if rp.off {
		return
	}
	rp.tick.Store(tick)
	if rp.bar != nil {
		rp.bar.SetCurrent(int64(done))
		return
	}
	now := time.Now().UnixNano()
	if last := rp.lastLine.Load(); now-last > int64(2*time.Second) && rp.lastLine.CompareAndSwap(last, now) {
		pct := ""
		if rp.total > 0 {
			pct = fmt.Sprintf(" (%.0f%%)", 100*float64(done)/float64(rp.total))
		}
		fmt.Fprintf(rp.w, "%s: tick %d%s, %.0f s\n", rp.what, tick, pct, time.Since(rp.start).Seconds())
	}
}

// Finish ends the display.
func (rp *Progress) Finish() {
	if rp.bar != nil {
		rp.bar.SetTotal(-1, true)
		rp.p.Wait()
	}
}
