package logbench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Progress receives a run's progress: a total number of units (phases),
// the current activity, and units as they finish.
type Progress interface {
	Start(total int)
	Activity(what string)
	Done(n int)
	Finish()
}

type nopProgress struct{}

func (nopProgress) Start(int)       {}
func (nopProgress) Activity(string) {}
func (nopProgress) Done(int)        {}
func (nopProgress) Finish()         {}

// NewProgress returns a progress display on w: a live bar when w is a
// terminal, one line per activity otherwise (logs, CI).
func NewProgress(w io.Writer) Progress {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return &barProgress{w: w}
		}
	}
	return &lineProgress{w: w}
}

// barProgress is an mpb bar: phases done of the total, elapsed time, and
// the current activity.
type barProgress struct {
	w   io.Writer
	p   *mpb.Progress
	bar *mpb.Bar
	mu  sync.Mutex
	now string
}

func (b *barProgress) Start(total int) {
	b.p = mpb.New(mpb.WithOutput(b.w), mpb.WithWidth(32), mpb.WithRefreshRate(150*time.Millisecond))
	b.bar = b.p.AddBar(int64(total),
		mpb.PrependDecorators(
			decor.Name("bench log ", decor.WC{}),
			decor.CountersNoUnit("%d/%d phases", decor.WCSyncWidth),
		),
		mpb.AppendDecorators(
			decor.Elapsed(decor.ET_STYLE_MMSS, decor.WC{W: 6}),
			decor.Any(func(decor.Statistics) string {
				b.mu.Lock()
				defer b.mu.Unlock()
				return "  " + b.now
			}),
		),
	)
}

func (b *barProgress) Activity(what string) {
	b.mu.Lock()
	b.now = what
	b.mu.Unlock()
}

func (b *barProgress) Done(n int) { b.bar.IncrBy(n) }

func (b *barProgress) Finish() {
	b.Activity("done")
	b.bar.SetTotal(-1, true) // complete now, whatever the count
	b.p.Wait()
}

// lineProgress prints one line per activity, with the time since the
// start and the phases done.
type lineProgress struct {
	w           io.Writer
	start       time.Time
	total, done int
}

func (l *lineProgress) Start(total int) { l.start, l.total = time.Now(), total }

func (l *lineProgress) Activity(what string) {
	fmt.Fprintf(l.w, "[%5.1fs %3d/%d] %s\n", time.Since(l.start).Seconds(), l.done, l.total, what)
}

func (l *lineProgress) Done(n int) { l.done += n }

func (l *lineProgress) Finish() {
	fmt.Fprintf(l.w, "[%5.1fs %3d/%d] done\n", time.Since(l.start).Seconds(), l.done, l.total)
}
