package hostile

import (
	"errors"
	"os"
	"testing"

	"github.com/anoptic/broadside/lineage"
)

// TestHostileRangesRefused: the hostile lineage ranges reach the decoder
// (their framing and checksum are right) and it refuses them.
func TestHostileRangesRefused(t *testing.T) {
	for name, build := range map[string]func() ([]byte, lineage.RangeInfo, error){"lying": lyingRange, "bomb": bombRange} {
		b, _, err := build()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64<<10 {
			t.Fatalf("%s: %d bytes: not a small hostile file", name, len(b))
		}
		var r lineage.Range
		if err := lineage.DecodeRange(b, &r); !errors.Is(err, lineage.ErrCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := lineage.DecodeRangeHeader(b); name == "bomb" && err != nil {
			t.Fatalf("the bomb's header is refused (%v): it must reach the body", err)
		}
	}
}

func TestRSSAndCount(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS %d, %v", rss, err)
	}
	n, rejected, classes := Count([]Outcome{{Class: "a", Rejected: true}, {Class: "a"}, {Class: "b", Rejected: true}})
	if n != 3 || rejected != 2 || classes != 2 {
		t.Fatalf("Count = %d %d %d", n, rejected, classes)
	}
}

func TestProcessCPU(t *testing.T) {
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	d, err := ProcessCPU(os.Getpid())
	if err != nil || d <= 0 {
		t.Fatalf("ProcessCPU = %v, %v (%d)", d, err, x)
	}
}
