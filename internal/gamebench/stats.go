package gamebench

import (
	"math"
	"slices"
	"time"
)

// Small statistics helpers (quantiles come from report, HdrHistogram).

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

func sum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t
}

func perSec(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 1 / d.Seconds()
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
