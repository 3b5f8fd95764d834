package world

import (
	"errors"
	"math/bits"
	"sync"

	"github.com/anoptic/broadside/replay"
)

// Frame is one tick's state of the whole world as the state fan-out sends
// it, assembled from every shard after the tick. The game implements it.
type Frame interface {
	// AddShard copies shard's part of the world from sim. It is called on
	// that shard's runner goroutine right after the step, and must copy:
	// the sim steps on when it returns.
	AddShard(shard uint32, sim replay.Sim)
	// Seal completes the frame once every shard added its part; prev is
	// the previous complete frame (nil for the first).
	Seal(prev Frame)
}

// FrameRing is how many recent ticks' frames Frames keeps: the bases of
// players' deltas and the spectators' delay must fall within it.
const FrameRing = 128

// maxPending is how many incomplete ticks Frames waits for before it gives
// up the oldest (a stalled shard).
const maxPending = 256

// Frames assembles each tick's Frame from the shards' runners and keeps the
// recent ones. A tick is complete when every shard stepped it; complete
// ticks are announced in order on Ready, and the player commands each
// applied are reported to OnApplied. It works without frames too (a nil
// newFrame): it then only tracks the newest complete tick.
type Frames struct {
	shards   int
	newFrame func(tick uint64) Frame

	mu      sync.Mutex
	pending map[uint64]*pendingFrame
	ring    [FrameRing]Frame
	ticks   [FrameRing]uint64
	last    uint64        // newest complete tick
	ready   chan struct{} // signalled when a tick is complete
	// onApplied, if set, is told each player command of a complete tick
	// (its player and client sequence), in log order.
	onApplied func(player uint32, seq uint64)
	// onComplete, if set, is told each tick as it completes, in order,
	// under mu (the world's overrun count).
	onComplete func(tick uint64)
}

type pendingFrame struct {
	f       Frame
	have    uint64 // bit per shard
	applied [][2]uint64
}

// NewFrames returns an assembler of frames of shards shards (at most
// MaxShards); newFrame may be nil.
func NewFrames(shards int, newFrame func(tick uint64) Frame) *Frames {
	return &Frames{shards: min(shards, MaxShards), newFrame: newFrame, pending: map[uint64]*pendingFrame{}, ready: make(chan struct{}, 1)}
}

// OnApplied sets the function told each player command of a complete tick.
// Set it before the world starts.
func (h *Frames) OnApplied(fn func(player uint32, seq uint64)) { h.onApplied = fn }

// setOnComplete sets the function told each tick as it completes.
func (h *Frames) setOnComplete(fn func(tick uint64)) {
	h.mu.Lock()
	h.onComplete = fn
	h.mu.Unlock()
}

// Add takes the shard of info (a Supervisor's OnTick, on the shard's
// runner goroutine, between two Steps); the tick's frame is sealed when
// every shard added its part.
func (h *Frames) Add(info replay.TickInfo) {
	h.add(info.Shard, info.Tick, func(p *pendingFrame) {
		// Every shard reads the whole log: the first to finish the tick
		// says which player commands it applied.
		for i := range info.Commands {
			if c := &info.Commands[i]; c.Player != 0 {
				p.applied = append(p.applied, [2]uint64{uint64(c.Player), c.ClientSeq})
			}
		}
	}, func(f Frame) error {
		f.AddShard(info.Shard, info.Sim)
		return nil
	})
}

// PartFrame is a Frame that can also be built from the shards' parts as
// their runners elsewhere encoded them (a front end of a world whose
// sectors run on other processes).
type PartFrame interface {
	Frame
	// AddPart decodes shard's part of the world (what the game encoded
	// from the shard's sim after the tick) into the frame.
	AddPart(shard uint32, part []byte) error
}

// AddPart is Add for a shard stepped elsewhere: part is the shard's part
// of the tick's frame (PartFrame.AddPart decodes it) and applied the
// player commands the tick applied (player, client sequence), in log
// order. It returns the decoder's error (the shard then counts as added,
// with nothing in the frame).
func (h *Frames) AddPart(shard uint32, tick uint64, part []byte, applied [][2]uint64) error {
	return h.add(shard, tick, func(p *pendingFrame) { p.applied = append(p.applied, applied...) }, func(f Frame) error {
		pf, ok := f.(PartFrame)
		if !ok {
			return errors.New("world: the game's frames cannot be built from parts")
		}
		return pf.AddPart(shard, part)
	})
}

// add adds shard's part of tick: first (when the tick's frame is new)
// records the applied commands, addTo adds the part to the frame.
func (h *Frames) add(shard uint32, tick uint64, first func(*pendingFrame), addTo func(Frame) error) error {
	if shard >= MaxShards {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if tick <= h.last {
		return nil // a recovering shard replaying ticks already complete
	}
	p := h.pending[tick]
	if p == nil {
		if len(h.pending) >= maxPending {
			oldest := tick
			for t := range h.pending {
				oldest = min(oldest, t)
			}
			delete(h.pending, oldest)
		}
		p = &pendingFrame{}
		if h.newFrame != nil {
			p.f = h.newFrame(tick)
		}
		first(p)
		h.pending[tick] = p
	}
	bit := uint64(1) << shard
	if p.have&bit != 0 {
		return nil
	}
	p.have |= bit
	var err error
	if p.f != nil {
		err = addTo(p.f)
	}
	if bits.OnesCount64(p.have) < h.shards {
		return err
	}
	delete(h.pending, tick)
	for t := range h.pending {
		if t < tick {
			delete(h.pending, t) // can no longer complete in order
		}
	}
	if p.f != nil {
		var prev Frame
		if h.last > 0 && h.ticks[h.last%FrameRing] == h.last {
			prev = h.ring[h.last%FrameRing]
		}
		p.f.Seal(prev)
	}
	h.ring[tick%FrameRing], h.ticks[tick%FrameRing] = p.f, tick
	h.last = tick
	if h.onComplete != nil {
		h.onComplete(tick)
	}
	if h.onApplied != nil {
		for _, a := range p.applied {
			h.onApplied(uint32(a[0]), a[1])
		}
	}
	select {
	case h.ready <- struct{}{}:
	default: // a signal is pending already
	}
	return err
}

// Ready is signalled when a tick is complete (one pending signal at most:
// read Latest after it).
func (h *Frames) Ready() <-chan struct{} { return h.ready }

// Latest returns the newest complete tick.
func (h *Frames) Latest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Frame returns the frame of tick if it is complete and still held.
func (h *Frames) Frame(tick uint64) Frame {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ticks[tick%FrameRing] != tick {
		return nil
	}
	return h.ring[tick%FrameRing]
}
