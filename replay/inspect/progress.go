package inspect

import (
	"cmp"
	"io"

	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay"
)

// ExportProgress shows on w (unless off) how far a recording of src has
// got ('replay export'): total is the ticks to go or, with inPos, the log
// positions (0: unknown); toTick, if not 0, is the last tick to record.
// It returns the source to record (src, tracking its position with
// inPos), the recording's progress callback (bsr.RecordConfig.Progress)
// and the function that ends the display.
func ExportProgress(w io.Writer, src replay.Source, total uint64, inPos bool, toTick uint64, off bool) (replay.Source, func(tick uint64), func()) {
	var posTracker *replay.UpTo
	if toTick > 0 && !inPos {
		total = min(cmp.Or(total, toTick), toTick)
	}
	if inPos {
		posTracker = &replay.UpTo{Src: src, Last: ^uint64(0)}
		if ps, ok := src.(*replay.UpTo); ok {
			posTracker = ps
		}
		src = posTracker
	}
	prog := report.NewProgress(w, "export", total, inPos, off)
	return src, func(t uint64) {
		if posTracker != nil {
			prog.Set(posTracker.Pos(), t)
		} else {
			prog.Set(t, t)
		}
	}, prog.Finish
}
