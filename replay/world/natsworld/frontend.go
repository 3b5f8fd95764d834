package natsworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// DefaultPartTimeout is how long a front end waits for the last sectors'
// parts of a tick once its first part arrived.
const DefaultPartTimeout = 250 * time.Millisecond

// maxAssembling bounds the ticks a front end holds incomplete.
const maxAssembling = 256

// FrontEndConfig configures a FrontEnd.
type FrontEndConfig struct {
	// World is the world id (required).
	World uint32
	// Sectors is how many sectors the world has (required: the game's
	// Shards).
	Sectors int
	// Frames receives every tick's sectors' parts (required): a Frames of
	// Sectors shards whose frames are world.PartFrames; its OnApplied is
	// told the commands each tick applied.
	Frames *world.Frames
	// Conn is the connection to the world's NATS servers (required).
	Conn *nats.Conn
	// Timeout is how long a tick waits for its missing sectors' parts
	// once its first part arrived (0: DefaultPartTimeout); then the tick
	// is assembled with those sectors' previous parts (FrontEndStats.Filled).
	Timeout time.Duration
	// OnFrame, if set, is called with each tick as it completes, in order,
	// from one goroutine (the player server's Publish).
	OnFrame func(tick uint64)
	// Logger receives the front end's messages (nil: slog.Default()).
	Logger *slog.Logger
	// HashTicks is how many recent ticks' state hashes the front end
	// keeps per sector, from its frames, for /world/hashes (0:
	// replay.DefaultHistoryTicks, 24 bytes a tick and sector).
	HashTicks int
}

// FrontEndStats counts what a front end received.
type FrontEndStats struct {
	// Ticks is the ticks assembled; Filled the sectors' parts that were
	// missing when their tick timed out (the sector's previous part stood
	// in); Late the parts that arrived after their tick was assembled;
	// Stale the parts under an older lease epoch than the sector's newest;
	// Bad the undecodable messages and parts.
	Ticks, Filled, Late, Stale, Bad uint64
	// Latest is the newest tick assembled. LatencyP50/P99/Max are the
	// frame latency over the last latencyWindow ticks assembled: from the
	// first of a tick's parts published (its owner's clock, right after
	// the step) to the tick assembled here (the timeout when a part was
	// missing included).
	Latest                             uint64
	LatencyP50, LatencyP99, LatencyMax time.Duration
	// HashConflicts counts the frames of a sector and tick whose state
	// hash differs from the one an earlier frame of it carried (two
	// owners of a hand-over disagreeing: a determinism failure); the
	// first hash is the one kept.
	HashConflicts uint64
}

// String says what the stats count, in one line ('serve --world' prints
// it when it stops, and the process tests read it).
func (st FrontEndStats) String() string {
	return fmt.Sprintf("%d ticks assembled (%d sector parts filled, %d late, %d stale, %d bad, %d hash conflicts), latest %d, frame latency p50/p99/max %v/%v/%v",
		st.Ticks, st.Filled, st.Late, st.Stale, st.Bad, st.HashConflicts, st.Latest,
		st.LatencyP50.Round(time.Microsecond), st.LatencyP99.Round(time.Microsecond), st.LatencyMax.Round(time.Microsecond))
}

// latencyWindow is how many recent ticks' latencies Stats reports on.
const latencyWindow = 1024

// FrontEnd assembles a world's frames from the parts its sector workers
// publish on NATS (SectorsSubject), for a front end that runs players'
// sessions without running sectors. A tick is complete when every
// sector's part of it arrived; when some still miss Timeout after its
// first part, it is assembled with those sectors' previous parts (a
// sector being taken over, say) and counted. Ticks are assembled in
// order: a part of a tick older than the newest assembled is late and
// dropped. Several front ends may serve one world: each receives every
// frame.
type FrontEnd struct {
	cfg FrontEndConfig
	log *slog.Logger

	// Run's goroutine only:
	pending map[uint64]*assembling
	prev    [][]byte // each sector's newest part assembled
	epochs  []uint64 // each sector's newest lease epoch seen
	last    uint64   // newest tick assembled

	// hashes are each sector's state hashes, from its frames (any
	// goroutine reads them: HashHistory locks).
	hashes []*replay.HashHistory

	ticks, filled, late, stale, bad, conflicts atomic.Uint64
	latest                                     atomic.Uint64

	latMu sync.Mutex
	lat   []time.Duration // a ring of the last latencyWindow ticks'
	latN  int
}

// assembling is a tick whose parts are arriving.
type assembling struct {
	parts     [][]byte // by sector; nil: not arrived
	have      int
	first     time.Time // when the first part arrived
	published int64     // the earliest publish time of its parts
	applied   [][2]uint64
}

// NewFrontEnd returns a front end; Run runs it.
func NewFrontEnd(cfg FrontEndConfig) (*FrontEnd, error) {
	switch {
	case cfg.World == 0:
		return nil, errors.New("natsworld: front end: world 0")
	case cfg.Sectors <= 0 || cfg.Sectors > world.MaxShards:
		return nil, errors.New("natsworld: front end: sectors out of range")
	case cfg.Frames == nil || cfg.Conn == nil:
		return nil, errors.New("natsworld: front end: frames and a NATS connection are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultPartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fe := &FrontEnd{cfg: cfg, log: cfg.Logger, pending: map[uint64]*assembling{},
		prev: make([][]byte, cfg.Sectors), epochs: make([]uint64, cfg.Sectors), hashes: make([]*replay.HashHistory, cfg.Sectors)}
	for s := range fe.hashes {
		fe.hashes[s] = replay.NewHashHistory(cfg.HashTicks)
	}
	return fe, nil
}

// Tick returns the newest tick assembled (world.HashSource).
func (fe *FrontEnd) Tick() uint64 { return fe.latest.Load() }

// Shards returns the world's sectors (world.HashSource).
func (fe *FrontEnd) Shards() int { return fe.cfg.Sectors }

// Hashes returns the state hashes of sector's recent ticks, as its
// frames carried them (world.HashSource).
func (fe *FrontEnd) Hashes(sector uint32) *replay.HashHistory { return fe.hashes[sector] }

var _ world.HashSource = (*FrontEnd)(nil)

// Stats returns what the front end counted so far.
func (fe *FrontEnd) Stats() FrontEndStats {
	st := FrontEndStats{Ticks: fe.ticks.Load(), Filled: fe.filled.Load(), Late: fe.late.Load(), Stale: fe.stale.Load(),
		Bad: fe.bad.Load(), Latest: fe.latest.Load(), HashConflicts: fe.conflicts.Load()}
	fe.latMu.Lock()
	lat := slices.Clone(fe.lat)
	fe.latMu.Unlock()
	if len(lat) > 0 {
		slices.Sort(lat)
		st.LatencyP50, st.LatencyP99, st.LatencyMax = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return st
}

// Run subscribes to the world's sector frames and assembles them until
// ctx ends; it returns ctx.Err() (or the subscription's error).
func (fe *FrontEnd) Run(ctx context.Context) error {
	msgs := make(chan *nats.Msg, 4096)
	sub, err := fe.cfg.Conn.ChanSubscribe(SectorsSubject(fe.cfg.World), msgs)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t := time.NewTicker(fe.cfg.Timeout / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-msgs:
			f, err := DecodeSectorFrame(m.Data)
			if err != nil || f.World != fe.cfg.World {
				fe.bad.Add(1)
				continue
			}
			fe.Add(f, time.Now())
		case now := <-t.C:
			fe.expire(now)
		}
	}
}

// Add takes a sector's frame received at now (Run's goroutine; exported
// for tests that feed frames without NATS).
func (fe *FrontEnd) Add(f SectorFrame, now time.Time) {
	if int(f.Sector) >= fe.cfg.Sectors {
		fe.bad.Add(1)
		return
	}
	switch {
	case f.Epoch < fe.epochs[f.Sector]:
		fe.stale.Add(1)
		return
	}
	// The hash counts even when the part comes too late for its tick.
	if th, ok := fe.hashes[f.Sector].Get(f.Tick); !ok {
		fe.hashes[f.Sector].Put(replay.TickHash{Tick: f.Tick, Pos: f.Pos, Hash: f.Hash})
	} else if th.Hash != f.Hash {
		fe.conflicts.Add(1)
		fe.log.Warn("front end: two frames of a sector and tick disagree on its state hash", "sector", f.Sector, "tick", f.Tick,
			"first", th.Hash, "then", f.Hash, "epoch", f.Epoch)
	}
	if f.Tick <= fe.last {
		fe.late.Add(1)
		return
	}
	fe.epochs[f.Sector] = f.Epoch
	a := fe.pending[f.Tick]
	if a == nil {
		if len(fe.pending) >= maxAssembling {
			fe.flushThrough(fe.oldest())
			if f.Tick <= fe.last {
				fe.late.Add(1)
				return
			}
		}
		a = &assembling{parts: make([][]byte, fe.cfg.Sectors), first: now, published: f.Published}
		for _, c := range f.Applied {
			a.applied = append(a.applied, [2]uint64{uint64(c.Player), c.Seq})
		}
		fe.pending[f.Tick] = a
	}
	if a.parts[f.Sector] != nil {
		return // a duplicate (a standby's recent frames, a second owner)
	}
	part := f.Payload
	if part == nil {
		part = []byte{}
	}
	a.parts[f.Sector] = append([]byte(nil), part...) // the message's buffer is not ours
	a.have++
	a.published = min(a.published, f.Published)
	if a.have == fe.cfg.Sectors {
		fe.flushThrough(f.Tick)
	}
}

// expire assembles the ticks whose parts have waited past the timeout.
func (fe *FrontEnd) expire(now time.Time) {
	var through uint64
	for t, a := range fe.pending {
		if now.Sub(a.first) >= fe.cfg.Timeout {
			through = max(through, t)
		}
	}
	if through > 0 {
		fe.flushThrough(through)
	}
}

// oldest returns the oldest pending tick.
func (fe *FrontEnd) oldest() uint64 {
	var o uint64
	for t := range fe.pending {
		if o == 0 || t < o {
			o = t
		}
	}
	return o
}

// flushThrough assembles every pending tick through tick, in order, the
// missing parts filled with their sectors' previous ones.
func (fe *FrontEnd) flushThrough(tick uint64) {
	for {
		t := fe.oldest()
		if t == 0 || t > tick {
			return
		}
		a := fe.pending[t]
		delete(fe.pending, t)
		for s, part := range a.parts {
			if part == nil {
				part = fe.prev[s]
				fe.filled.Add(1)
				if part == nil {
					part = []byte{} // never seen: the sector adds nothing
				}
			}
			fe.prev[s] = part
			var applied [][2]uint64
			if s == 0 {
				applied = a.applied
			}
			if err := fe.cfg.Frames.AddPart(uint32(s), t, part, applied); err != nil && len(part) > 0 {
				fe.bad.Add(1)
				fe.log.Debug("front end: undecodable sector part", "sector", s, "tick", t, "err", err)
			}
		}
		fe.last = t
		fe.ticks.Add(1)
		fe.latest.Store(t)
		if a.published > 0 {
			d := time.Since(time.Unix(0, a.published))
			fe.latMu.Lock()
			if len(fe.lat) < latencyWindow {
				fe.lat = append(fe.lat, d)
			} else {
				fe.lat[fe.latN%latencyWindow] = d
			}
			fe.latN++
			fe.latMu.Unlock()
		}
		if fe.cfg.OnFrame != nil {
			fe.cfg.OnFrame(t)
		}
	}
}

// TickerConfig configures RunTicker.
type TickerConfig struct {
	// World is the world id; Log its command log (the tick markers go
	// there); Leases the lease bucket as this process sees it (it need not
	// register as a worker: no sector is assigned to it); Rate the game's
	// ticks per second.
	World  uint32
	Log    world.Log
	Leases *Leases
	Rate   int
	Logger *slog.Logger
	// Grace is how late the next tick marker may be before this process,
	// not holding the lease, bridges the ticks itself from a tail of the
	// log (WorkerConfig.TickerGrace: 0 the default, negative none).
	Grace time.Duration
	// NoSecondTicker is WorkerConfig.NoSecondTicker.
	NoSecondTicker bool
}

// RunTicker competes for the world's Ticker lease (TickerLease) and runs
// the Ticker while it holds it, until ctx ends; then it releases the
// lease. A front end runs it with serve --world --ticker, as a worker does
// with --ticker: exactly one holder at a time appends the tick markers.
func RunTicker(ctx context.Context, cfg TickerConfig) error {
	switch {
	case cfg.World == 0 || cfg.Log == nil || cfg.Leases == nil || cfg.Rate <= 0:
		return errors.New("natsworld: ticker: a world, a log, leases and a rate are required")
	case cfg.Logger == nil:
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: WorkerConfig{World: cfg.World, Log: cfg.Log, Leases: cfg.Leases, Game: world.Game{TickRate: cfg.Rate}, TickerGrace: cfg.Grace, NoSecondTicker: cfg.NoSecondTicker},
		log: cfg.Logger.With("worker", cfg.Leases.Worker())}
	w.runTicker(ctx, func(ctx context.Context, observe func(uint64)) { tailTicks(ctx, cfg.Log, cfg.World, observe) })
	return ctx.Err()
}
