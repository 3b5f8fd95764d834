// Package rtt estimates a peer's round-trip time for the pure cores of the
// command log (the client's and the sequencing leader's retransmissions),
// so that a retransmission waits for what the peers currently take
// instead of a fixed timeout: under load, a fixed timeout resends batches
// that are only queued, and the resends add to the load.
//
// Times are in the cores' ticks; the package reads no clock.
package rtt

// Estimator keeps a smoothed round-trip time (Jacobson and Karels, as TCP
// does). The zero value has no samples.
type Estimator struct {
	srtt8, rttvar4 int64 // smoothed RTT x 8, mean deviation x 4
	samples        int
}

// Observe adds one round-trip sample (at least 1 tick is counted).
func (e *Estimator) Observe(sample int64) {
	sample = max(sample, 1)
	if e.samples == 0 {
		e.srtt8, e.rttvar4 = sample<<3, sample<<1
	} else {
		d := sample - e.srtt8>>3
		e.srtt8 += d
		if d < 0 {
			d = -d
		}
		e.rttvar4 += d - e.rttvar4>>2
	}
	e.samples++
}

// Timeout is the retransmission timeout: srtt + 4 rttvar, at least floor
// (floor alone before the first sample).
func (e *Estimator) Timeout(floor int64) int64 {
	if e.samples == 0 {
		return floor
	}
	return max(floor, e.srtt8>>3+e.rttvar4)
}
