package cluster

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anoptic/broadside/replay/world/natsworld"
)

// Frame is a sector frame received from NATS, with when.
type Frame struct {
	F  natsworld.SectorFrame
	At time.Time
}

// Watcher receives every sector frame and takeover report the workers
// publish, as a front end would.
type Watcher struct {
	mu        sync.Mutex
	frames    []Frame
	takeovers []natsworld.TakeoverReport
	latest    map[uint32]uint64
	bad       int
	subs      []*nats.Subscription
}

// Watch subscribes to the world's frames and takeover reports.
func (c *Cluster) Watch() (*Watcher, error) {
	w := &Watcher{latest: map[uint32]uint64{}}
	fs, err := c.Conn.Subscribe(natsworld.SectorsSubject(World), func(m *nats.Msg) {
		f, err := natsworld.DecodeSectorFrame(m.Data)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.bad++
			return
		}
		w.frames = append(w.frames, Frame{F: f, At: time.Now()})
		w.latest[f.Sector] = max(w.latest[f.Sector], f.Tick)
	})
	if err != nil {
		return nil, err
	}
	ts, err := c.Conn.Subscribe(natsworld.TakeoverSubject(World), func(m *nats.Msg) {
		r, err := natsworld.DecodeTakeoverReport(m.Data)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.bad++
			return
		}
		w.takeovers = append(w.takeovers, r)
	})
	if err != nil {
		_ = fs.Unsubscribe()
		return nil, err
	}
	w.subs = []*nats.Subscription{fs, ts}
	return w, c.Conn.Flush()
}

// Stop unsubscribes.
func (w *Watcher) Stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

// MinTick returns the lowest latest tick of sectors 0..n-1.
func (w *Watcher) MinTick(n uint32) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := uint64(0)
	for s := range n {
		if s == 0 || w.latest[s] < m {
			m = w.latest[s]
		}
	}
	return m
}

// Latest returns each sector's latest tick.
func (w *Watcher) Latest() map[uint32]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[uint32]uint64, len(w.latest))
	for k, v := range w.latest {
		out[k] = v
	}
	return out
}

// Takeover returns the first report of sector taken by a worker other
// than from after at.
func (w *Watcher) Takeover(sector uint32, from string, at time.Time) (natsworld.TakeoverReport, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.takeovers {
		if r.Sector == sector && r.Worker != from && r.Acquired > at.UnixNano() {
			return r, true
		}
	}
	return natsworld.TakeoverReport{}, false
}

// Frames returns the frames received so far and the count of undecodable
// messages.
func (w *Watcher) Frames() ([]Frame, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Frame(nil), w.frames...), w.bad
}
