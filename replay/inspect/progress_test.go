package inspect_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/inspect"
)

func TestExportProgress(t *testing.T) {
	entries := make([]msg.Entry, 8)
	for i := range entries {
		entries[i].Pos = uint64(i + 1)
	}
	// In ticks: the total is cut to toTick, the source passes as it is.
	var b bytes.Buffer
	src := replay.NewSliceSource(entries, 1)
	got, progress, finish := inspect.ExportProgress(&b, src, 100, false, 40, false)
	if got != src {
		t.Fatal("a tick-counted source was wrapped")
	}
	progress(10)
	finish()
	if !strings.HasPrefix(b.String(), "export: tick 10 (25%), ") {
		t.Fatalf("%q", b.String())
	}

	// In log positions: the source is tracked and the display counts
	// positions read, whatever the tick.
	b.Reset()
	got, progress, finish = inspect.ExportProgress(&b, replay.NewSliceSource(entries, 1), 8, true, 0, false)
	for range 6 {
		if _, err := got.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	progress(3)
	finish()
	if !strings.HasPrefix(b.String(), "export: tick 3 (75%), ") {
		t.Fatalf("%q", b.String())
	}
	// A source already bounded keeps its bound; off shows nothing.
	b.Reset()
	up := &replay.UpTo{Src: replay.NewSliceSource(entries, 1), Last: 2}
	got, progress, _ = inspect.ExportProgress(&b, up, 2, true, 0, true)
	if got != up {
		t.Fatal("an UpTo source was wrapped again")
	}
	progress(1)
	if b.Len() != 0 {
		t.Fatalf("off, yet: %q", b.String())
	}
}
