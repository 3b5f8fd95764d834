package viewer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
)

// LiveOptions configures DialLive.
type LiveOptions struct {
	// Addr is the game server's UDP address.
	Addr string
	// TLS must trust the server's certificate (transport.ClientTLS of the
	// dev CA's ca.pem, for a dev server).
	TLS *tls.Config
	// Token is a signed token the server accepts ('broadside token');
	// spectators authenticate like players but cannot send commands.
	Token string
	// Config is the server's world (its seed, size, sectors and islands):
	// the state stream carries ships and cannonballs, not the geometry.
	// A server that describes its world in its Welcome (broadside serve
	// does) overrides it, unless Fixed is set.
	Config broadside.Config
	Fixed  bool
	// History is the number of recent ticks kept to seek back in
	// (default 60 seconds of ticks).
	History int
	// Lineage, if set, is the server's admin address (broadside serve
	// --admin-addr): Why then asks the server's lineage store, with the
	// admin bearer token LineageToken if set (serve --admin-token-file).
	Lineage      string
	LineageToken string
}

// Live follows a running server as a spectator: it receives the state of
// every tick (a delta against the last tick it acknowledged, decoded by
// broadside.ApplyDelta), keeps the last History ticks to seek back in,
// and reports its last tick growing. It carries no lineage.
type Live struct {
	client Feed
	world  World
	keep   int

	mu      sync.Mutex
	frames  []*Frame // in tick order; ticks may have gaps (dropped updates)
	bases   map[uint64]*broadside.Frame
	cur     uint64
	updates uint64
	bad     uint64
	err     error

	cancel context.CancelFunc
	done   chan struct{}

	lineage   *lineage.HTTPStore
	ixMu      sync.Mutex
	ix        *lineage.Index
	ixFetched time.Time
}

var (
	_ Source       = (*Live)(nil)
	_ LiveSource   = (*Live)(nil)
	_ StatusSource = (*Live)(nil)
)

// StatusSource is implemented by sources with something to say in the
// status bar (a connection's state).
type StatusSource interface {
	Status() string
}

// Feed is a spectator session: the session protocol's Welcome, then a
// state update per tick, each acknowledged so that later ones can be
// deltas against it. A *client.Client over QUIC is one (DialLive); a
// browser's WebSocket session is another (package wsfeed).
type Feed interface {
	Welcome() wire.Welcome
	Updates() <-chan wire.StateUpdate
	AckState(tick uint64) error
	Done() <-chan struct{}
	Err() error
	Close() error
}

// NewLive follows feed, whose session is open, as DialLive does: the
// world is the one its Welcome describes (or o.Config, if o.Fixed or the
// Welcome describes none); o.Addr names it. It waits for the first state
// update.
func NewLive(ctx context.Context, feed Feed, o LiveOptions) (*Live, error) {
	if o.History <= 0 {
		o.History = 60 * broadside.TickRate
	}
	if world := feed.Welcome().World; len(world) > 0 && !o.Fixed {
		var cfg broadside.Config
		if err := cfg.UnmarshalBinary(world); err != nil {
			feed.Close()
			return nil, fmt.Errorf("viewer: live %s: the server's world: %w", o.Addr, err)
		}
		o.Config = cfg
	}
	w, err := WorldOf("live: "+o.Addr, o.Config)
	if err != nil {
		feed.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l := &Live{client: feed, world: w, keep: o.History,
		bases: map[uint64]*broadside.Frame{}, cancel: cancel, done: make(chan struct{})}
	if o.Lineage != "" {
		l.lineage = lineage.NewHTTPStore(strings.TrimSuffix(o.Lineage, "/") + "/lineage/store").WithToken(o.LineageToken)
	}
	go l.run(runCtx)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		l.mu.Lock()
		n, err := len(l.frames), l.err
		l.mu.Unlock()
		if n > 0 {
			return l, nil
		}
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("viewer: live %s: %w", o.Addr, err)
		}
		select {
		case <-ctx.Done():
			l.Close()
			return nil, fmt.Errorf("viewer: live %s: no state received: %w", o.Addr, ctx.Err())
		case <-poll.C:
		}
	}
}

// run applies the server's updates until the session ends.
func (l *Live) run(ctx context.Context) {
	defer close(l.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.client.Done():
			l.mu.Lock()
			l.err = fmt.Errorf("connection closed: %v", l.client.Err())
			l.mu.Unlock()
			return
		case u := <-l.client.Updates():
			l.mu.Lock()
			var base *broadside.Frame
			if u.BaseTick != 0 {
				base = l.bases[u.BaseTick]
			}
			last := uint64(0)
			if n := len(l.frames); n > 0 {
				last = l.frames[n-1].Tick
			}
			if u.Tick <= last || u.BaseTick != 0 && base == nil {
				l.mu.Unlock()
				continue // late (datagrams reorder), or against a base we dropped
			}
			f, err := broadside.ApplyDelta(base, u.Tick, u.Payload)
			if err != nil {
				l.bad++
				l.mu.Unlock()
				continue
			}
			l.updates++
			l.bases[f.Tick] = f
			l.frames = append(l.frames, &Frame{Tick: f.Tick, Ships: f.Ships, Balls: f.Balls})
			if len(l.frames) > l.keep {
				drop := len(l.frames) - l.keep
				for _, old := range l.frames[:drop] {
					delete(l.bases, old.Tick)
				}
				l.frames = append(l.frames[:0], l.frames[drop:]...)
			}
			if l.cur < l.frames[0].Tick {
				l.cur = l.frames[0].Tick
			}
			l.mu.Unlock()
			// Later deltas are against this tick.
			_ = l.client.AckState(f.Tick)
		}
	}
}

// Live implements LiveSource.
func (l *Live) Live() bool { return true }

// World implements Source.
func (l *Live) World() World { return l.world }

// Ticks implements Source: the ticks held.
func (l *Live) Ticks() (first, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.frames) == 0 {
		return 0, 0
	}
	return l.frames[0].Tick, l.frames[len(l.frames)-1].Tick
}

// at returns the index of the frame shown for tick: the last at or before
// it (ticks may have gaps).
func (l *Live) at(tick uint64) int {
	i := sort.Search(len(l.frames), func(k int) bool { return l.frames[k].Tick > tick })
	return max(i-1, 0)
}

// Frame implements Source.
func (l *Live) Frame() *Frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.frames) == 0 {
		return nil
	}
	return l.frames[l.at(l.cur)]
}

// Seek implements Source.
func (l *Live) Seek(tick uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.frames) == 0 || tick < l.frames[0].Tick || tick > l.frames[len(l.frames)-1].Tick {
		return fmt.Errorf("viewer: tick %d is not held (live history is the last %d ticks)", tick, l.keep)
	}
	l.cur = l.frames[l.at(tick)].Tick
	return nil
}

// Step implements Source.
func (l *Live) Step() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.at(l.cur)
	if i+1 >= len(l.frames) {
		return errors.New("viewer: at the live tail")
	}
	l.cur = l.frames[i+1].Tick
	return nil
}

// Verification implements Source: there is nothing to verify live.
func (l *Live) Verification() Verification { return Verification{State: VerifyNone} }

// Why implements Source: live state carries no lineage.
func (l *Live) Why(e lineage.EntityID, tick uint64, depth int) (*lineage.WhyResult, error) {
	if l.lineage == nil {
		return nil, fmt.Errorf("%w: a spectator receives state, not lineage: give the server's admin address (--admin) to ask it, or open a recording (.bsr)", ErrNoLineage)
	}
	l.ixMu.Lock()
	defer l.ixMu.Unlock()
	// The server stores lineage in ranges as the match goes: reload the
	// index at most once a second, and whenever it does not reach tick.
	if l.ix == nil || time.Since(l.ixFetched) > time.Second && l.ix.Stats().LastTick < tick {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ix, err := lineage.LoadIndex(ctx, l.lineage)
		cancel()
		l.ixFetched = time.Now()
		if err != nil {
			return nil, fmt.Errorf("%w: the server's lineage: %v", ErrNoLineage, err)
		}
		l.ix = ix
	}
	return l.ix.Why(lineage.AnyShard, e, min(tick, l.ix.Stats().LastTick), depth)
}

// Status implements StatusSource.
func (l *Live) Status() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("%d updates", l.updates)
	if l.bad > 0 {
		s += fmt.Sprintf(", %d malformed", l.bad)
	}
	if l.err != nil {
		s += ", " + l.err.Error()
	}
	return s
}

// Close implements Source.
func (l *Live) Close() error {
	l.cancel()
	err := l.client.Close()
	<-l.done
	return err
}
