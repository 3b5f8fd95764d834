// Package report holds what the tools and benchmarks share to report
// results: latency quantiles (HdrHistogram, never hand-written), PNG
// charts (gonum/plot), JSON files and human-readable sizes and times.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// Bytes formats a size in bytes for people (B, KiB, MiB or GiB).
func Bytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Us is d in microseconds.
func Us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// PlayTime formats ticks at rate ticks per second as play time (m:ss.s).
func PlayTime(ticks, rate uint64) string {
	tenths := ticks * 10 / rate
	return fmt.Sprintf("%d:%02d.%d", tenths/600, tenths%600/10, tenths%10)
}

// WriteJSON writes v to w as indented JSON and a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteJSONFile writes v as indented JSON to a new file at path.
func WriteJSONFile(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteJSON(f, v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
