package snapshot

import (
	"time"
)

// DefaultRecoveryTarget is the default bound on the time from a shard's
// crash to its being live again.
const DefaultRecoveryTarget = 200 * time.Millisecond

// Policy decides when a shard captures a snapshot and whether it is a full
// base or a delta. The zero value means the defaults.
//
// Recovery costs the restore of the newest chain (proportional to its raw
// bytes) plus the replay of the ticks since it (proportional to the step
// time). The policy captures when the estimate of that cost would exceed
// Headroom × RecoveryTarget, or earlier when the dirty bytes reach
// DeltaFraction of a full snapshot (so deltas stay small and the pause
// short whatever the dirty rate). It starts a new base when restoring the
// chain would cost more than ChainFactor full restores or MaxChain
// snapshots.
type Policy struct {
	// RecoveryTarget bounds crash-to-live time (default 200 ms).
	RecoveryTarget time.Duration
	// Headroom is the share of RecoveryTarget the estimated restore and
	// replay may use (default 0.5): the rest covers detection, the ticks
	// that arrive while recovering and estimation error.
	Headroom float64
	// DeltaFraction is the dirty share of a full snapshot at which a delta
	// is captured regardless of the recovery estimate (default 0.05). In
	// busy play this makes deltas frequent and small (a short pause, a
	// short replay) at the price of more, smaller writes; in quiet play
	// the recovery estimate sets the interval.
	DeltaFraction float64
	// ChainFactor bounds a chain's raw bytes to this multiple of its base
	// (default 4).
	ChainFactor float64
	// MaxChain bounds the snapshots of a chain, base included (default
	// 256).
	MaxChain int
	// MinInterval is the least number of ticks between captures (default
	// 1).
	MinInterval uint64
	// MaxInterval, if non-zero, forces a capture at least this often (in
	// ticks), e.g. for tests.
	MaxInterval uint64
	// RestoreNsPerByte is the initial estimate of the restore cost per
	// raw byte of a chain (default 3 ns); Scheduler.ObserveRestore refines
	// it.
	RestoreNsPerByte float64
	// FixedCost is the part of a recovery that does not depend on the
	// chain or the replay: detection, listing, opening the log (default
	// 5 ms).
	FixedCost time.Duration
	// ReplayFactor scales the live step time into the replay time of a
	// tick (decoding records included; default 1.3).
	ReplayFactor float64
}

func (p Policy) withDefaults() Policy {
	if p.RecoveryTarget <= 0 {
		p.RecoveryTarget = DefaultRecoveryTarget
	}
	if p.Headroom <= 0 || p.Headroom > 1 {
		p.Headroom = 0.5
	}
	if p.DeltaFraction <= 0 {
		p.DeltaFraction = 0.05
	}
	if p.ChainFactor <= 0 {
		p.ChainFactor = 4
	}
	if p.MaxChain <= 0 {
		p.MaxChain = 256
	}
	p.MaxChain = min(p.MaxChain, MaxChainLen)
	if p.MinInterval == 0 {
		p.MinInterval = 1
	}
	if p.RestoreNsPerByte <= 0 {
		p.RestoreNsPerByte = 3
	}
	if p.FixedCost <= 0 {
		p.FixedCost = 5 * time.Millisecond
	}
	if p.ReplayFactor <= 0 {
		p.ReplayFactor = 1.3
	}
	return p
}

// Scheduler applies a Policy to one shard's tick loop. It is not safe for
// concurrent use: the tick loop owns it.
type Scheduler struct {
	p Policy

	stepNs    float64 // EWMA of the step time
	restoreNs float64 // per raw byte
	lastTick  uint64  // tick of the last capture (or the restored snapshot)
	chain     bool    // a chain exists to extend
	// lost counts the chains lost in a row (a capture taken and then not
	// stored, e.g. on a full disk): the next full capture waits 2^lost
	// ticks (at most 2^maxLostBackoff) after the last one, instead of
	// capturing the whole state again at every tick while the store fails.
	lost     int
	chainLen int
	chainRaw float64
	fullRaw  float64 // raw bytes of the last base
}

// NewScheduler returns a scheduler for a shard that has no snapshot yet.
func NewScheduler(p Policy) *Scheduler {
	p = p.withDefaults()
	return &Scheduler{p: p, restoreNs: p.RestoreNsPerByte}
}

// Policy returns the policy with defaults applied.
func (s *Scheduler) Policy() Policy { return s.p }

// Restored tells the scheduler the shard was restored from tip, whose chain
// the next delta extends; baseRaw is the raw size of the chain's base (0 if
// unknown: it is then estimated).
func (s *Scheduler) Restored(tip Meta, baseRaw uint64) {
	s.lastTick, s.chain = tip.Tick, true
	s.chainLen, s.chainRaw = int(tip.ChainLen), float64(tip.ChainRawBytes)
	s.fullRaw = float64(baseRaw)
	if baseRaw == 0 {
		s.fullRaw = float64(tip.ChainRawBytes) / float64(tip.ChainLen)
	}
}

// ObserveStep feeds the duration of one Step.
func (s *Scheduler) ObserveStep(d time.Duration) {
	const alpha = 0.05
	ns := float64(d.Nanoseconds())
	if s.stepNs == 0 {
		s.stepNs = ns
		return
	}
	s.stepNs += alpha * (ns - s.stepNs)
}

// ObserveRestore feeds a measured restore: its duration and the raw bytes
// of the chain restored.
func (s *Scheduler) ObserveRestore(d time.Duration, rawBytes uint64) {
	if rawBytes < 1<<16 {
		return // too small to say anything about the cost per byte
	}
	s.restoreNs = max(float64(d.Nanoseconds())/float64(rawBytes), 0.1)
}

// Estimate returns the estimated recovery time if the shard crashed after
// tick: restoring its chain and replaying the ticks since.
func (s *Scheduler) Estimate(tick uint64) time.Duration {
	return time.Duration(s.estimateNs(tick, 0))
}

func (s *Scheduler) estimateNs(tick uint64, extraRaw float64) float64 {
	since := float64(tick - min(s.lastTick, tick))
	return float64(s.p.FixedCost) + s.restoreNs*(s.chainRaw+extraRaw) + since*s.stepNs*s.p.ReplayFactor
}

// Decide says whether to capture after tick, given the set's dirty bytes,
// and whether the capture must be full (needFull: the writer has no chain
// to extend).
func (s *Scheduler) Decide(tick uint64, dirtyBytes int, needFull bool) (take, full bool) {
	since := tick - min(s.lastTick, tick)
	if s.chain && since < s.p.MinInterval {
		return false, false
	}
	if !s.chain && s.lost > 0 && since < 1<<min(s.lost, maxLostBackoff) {
		return false, false
	}
	if s.chain && !needFull && since >= 8 {
		s.lost = 0 // the chain has held for a while: its capture was stored
	}
	if needFull || !s.chain {
		return true, true
	}
	dirty := float64(dirtyBytes)
	budget := s.p.Headroom * float64(s.p.RecoveryTarget)
	// Capture when the next tick's estimate would be over budget.
	take = s.estimateNs(tick+1, 0) > budget ||
		(s.fullRaw > 0 && dirty >= s.p.DeltaFraction*s.fullRaw) ||
		(s.p.MaxInterval > 0 && since >= s.p.MaxInterval)
	if !take {
		return false, false
	}
	full = s.chainLen+1 > s.p.MaxChain ||
		s.chainRaw+dirty > s.p.ChainFactor*s.fullRaw ||
		s.restoreNs*(s.chainRaw+dirty) > budget/2
	return true, full
}

// Taken records a capture after tick of rawBytes (the capture's encoded
// size).
func (s *Scheduler) Taken(tick uint64, full bool, rawBytes int) {
	raw := float64(rawBytes)
	s.lastTick = tick
	if full || !s.chain {
		s.chain, s.chainLen, s.chainRaw, s.fullRaw = true, 1, raw, raw
		return
	}
	s.chainLen++
	s.chainRaw += raw
}

// maxLostBackoff bounds the wait after lost chains to 2^4 = 16 ticks
// (about half a second at 30 Hz): a full capture at every tick on a
// failing store is the cost to avoid, and a longer wait would leave a
// crash that much more log to replay once the store works again.
const maxLostBackoff = 4

// Broken records that the writer lost the chain: the next capture is full,
// and after a chain it had is lost, it waits (see lost).
func (s *Scheduler) Broken() {
	if s.chain {
		s.lost++
	}
	s.chain = false
}
