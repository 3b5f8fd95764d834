package report

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Durations is a histogram of durations (HdrHistogram: 1 ns to an hour,
// three significant digits): the one way tools and benchmarks compute
// latency quantiles. Longer durations count as an hour. The zero value is
// not usable; use NewDurations or DurationsOf.
type Durations struct{ h *hdrhistogram.Histogram }

// NewDurations returns an empty histogram of durations.
func NewDurations() *Durations { return &Durations{h: hdrhistogram.New(1, int64(time.Hour), 3)} }

// DurationsOf returns the histogram of ds.
func DurationsOf(ds []time.Duration) *Durations {
	d := NewDurations()
	for _, x := range ds {
		d.Record(x)
	}
	return d
}

// Record adds x (negative durations count as 0).
func (d *Durations) Record(x time.Duration) {
	_ = d.h.RecordValue(min(max(int64(x), 0), int64(time.Hour)))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1: 0.5 is the median, 1 the
// maximum), 0 if the histogram is empty.
func (d *Durations) Quantile(q float64) time.Duration {
	if d.h.TotalCount() == 0 {
		return 0
	}
	if q >= 1 {
		return d.Max()
	}
	return time.Duration(d.h.ValueAtQuantile(100 * q))
}

// Max is the largest duration recorded (at the histogram's precision).
func (d *Durations) Max() time.Duration { return time.Duration(d.h.Max()) }

// Count is the number of durations recorded.
func (d *Durations) Count() int { return int(d.h.TotalCount()) }

// Quantile returns the q-quantile of ds (see Durations.Quantile).
func Quantile(ds []time.Duration, q float64) time.Duration { return DurationsOf(ds).Quantile(q) }

// ValueQuantile returns the q-quantile (0 ≤ q ≤ 1) of the non-negative
// numbers vs (sizes, ratios, speeds), 0 if there are none. The values are
// recorded in an HdrHistogram in multiples of unit (for example 1 for byte
// counts, 1e-6 for ratios near 1), at four significant digits.
func ValueQuantile(vs []float64, q, unit float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	top := int64(2)
	for _, v := range vs {
		top = max(top, int64(math.Ceil(v/unit))+1)
	}
	h := hdrhistogram.New(1, top, 4)
	for _, v := range vs {
		_ = h.RecordValue(max(int64(math.Round(v/unit)), 0))
	}
	if q >= 1 {
		return float64(h.Max()) * unit
	}
	return float64(h.ValueAtQuantile(100*q)) * unit
}
