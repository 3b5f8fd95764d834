package natsworld

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// FrontEndNodeConfig configures a FrontEndNode: what 'serve --world' runs
// beside its player sessions.
type FrontEndNodeConfig struct {
	// World, Sectors, Frames, OnFrame and Logger: as FrontEndConfig.
	World   uint32
	Sectors int
	Frames  *world.Frames
	OnFrame func(tick uint64)
	Logger  *slog.Logger
	// Conn is the connection to the world's NATS servers (required; the
	// node does not close it).
	Conn *nats.Conn
	// Ticker makes the node compete for the world's Ticker lease as
	// TickerID (required with Ticker) and append the tick markers to Log
	// at Rate while it holds it.
	Ticker   bool
	TickerID string
	// TickerGrace and NoSecondTicker are TickerConfig's Grace and
	// NoSecondTicker.
	TickerGrace    time.Duration
	NoSecondTicker bool
	Log            world.Log
	Rate           int
	// Stale is how long without a tick assembled makes the node not ready
	// (default 2 s).
	Stale time.Duration
	// Replicas of the lease buckets (and of the lineage store) if the
	// node creates them (default 1; 3 on a NATS cluster).
	Replicas int
	// Lineage makes the node open the world's shared lineage store
	// (OpenLineageStore), where its sector workers record the lineage:
	// LineageStore then answers the admin's lineage queries about the
	// whole world.
	Lineage bool
}

// FrontEndNode is a running front end: the frame assembly (FrontEnd), the
// Ticker when asked, and the status the admin endpoints report.
type FrontEndNode struct {
	cfg    FrontEndNodeConfig
	fe     *FrontEnd
	leases *Leases
	ticker *Leases                      // the Ticker's lease bucket
	lin    atomic.Pointer[LineageStore] // once opened
	cancel context.CancelFunc
	done   chan struct{}
	// lastTick is when the newest tick was assembled (Unix nanoseconds).
	lastTick atomic.Int64
	started  time.Time
}

// StartFrontEndNode starts the front end's goroutines; Stop stops them.
func StartFrontEndNode(ctx context.Context, cfg FrontEndNodeConfig) (*FrontEndNode, error) {
	if cfg.Conn == nil {
		return nil, errors.New("natsworld: front end: a NATS connection is required")
	}
	if cfg.Ticker && (cfg.TickerID == "" || cfg.Log == nil || cfg.Rate <= 0) {
		return nil, errors.New("natsworld: front end: the Ticker needs an id, a log and a rate")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stale <= 0 {
		cfg.Stale = 2 * time.Second
	}
	n := &FrontEndNode{cfg: cfg, done: make(chan struct{}), started: time.Now()}
	onFrame := cfg.OnFrame
	fe, err := NewFrontEnd(FrontEndConfig{World: cfg.World, Sectors: cfg.Sectors, Frames: cfg.Frames, Conn: cfg.Conn, Logger: cfg.Logger,
		OnFrame: func(tick uint64) {
			n.lastTick.Store(time.Now().UnixNano())
			if onFrame != nil {
				onFrame(tick)
			}
		}})
	if err != nil {
		return nil, err
	}
	n.fe = fe
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	id := cfg.TickerID
	if id == "" {
		id = "front-end"
	}
	// The lease bucket: the Ticker's lease, and the sectors' owners the
	// status reports (reading them registers nothing).
	if n.leases, err = OpenLeases(ctx, js, LeasesConfig{World: cfg.World, Worker: id, Replicas: cfg.Replicas}); err != nil {
		return nil, err
	}
	if n.ticker, err = OpenTickerLeases(ctx, js, LeasesConfig{World: cfg.World, Worker: id, Replicas: cfg.Replicas}); err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	n.cancel = cancel
	go func() {
		defer close(n.done)
		ldone := make(chan struct{})
		go func() {
			defer close(ldone)
			if cfg.Lineage {
				n.openLineage(fctx, js)
			}
		}()
		defer func() { <-ldone }()
		tdone := make(chan struct{})
		go func() {
			defer close(tdone)
			if cfg.Ticker {
				_ = RunTicker(fctx, TickerConfig{World: cfg.World, Log: cfg.Log, Leases: n.ticker, Rate: cfg.Rate, Logger: cfg.Logger,
					Grace: cfg.TickerGrace, NoSecondTicker: cfg.NoSecondTicker})
			}
		}()
		_ = fe.Run(fctx)
		<-tdone
	}()
	return n, nil
}

// Stop stops the node and returns what its front end assembled.
func (n *FrontEndNode) Stop() FrontEndStats {
	n.cancel()
	<-n.done
	if l := n.lin.Load(); l != nil {
		l.Close()
	}
	return n.fe.Stats()
}

// openLineage opens the shared lineage store, retrying every second
// until it opens or ctx ends: the players' front end does not wait for an
// admin feature (several processes creating a replicated bucket at once
// can stall each other for seconds), and its lineage queries answer 503
// meanwhile.
func (n *FrontEndNode) openLineage(ctx context.Context, js jetstream.JetStream) {
	for {
		s, err := OpenLineageStore(ctx, js, LineageStoreConfig{World: n.cfg.World, Replicas: n.cfg.Replicas})
		if err == nil {
			n.lin.Store(s)
			return
		}
		if ctx.Err() != nil {
			return
		}
		n.cfg.Logger.Warn("front end: lineage store (retrying)", "err", err)
		sleep(ctx, time.Second)
	}
}

// LineageStore returns the world's shared lineage store (nil without
// FrontEndNodeConfig.Lineage, or until it opened; closed once the node
// stopped), read-write
// as every LineageStore is: the admin endpoints only read it. release is
// a no-op (it matches World.LineageStore).
func (n *FrontEndNode) LineageStore() (s lineage.Store, release func()) {
	if n == nil {
		return nil, func() {}
	}
	if l := n.lin.Load(); l != nil {
		return l, func() {}
	}
	return nil, func() {}
}

// Tick returns the newest tick assembled (world.HashSource).
func (n *FrontEndNode) Tick() uint64 { return n.fe.Tick() }

// Shards returns the world's sectors (world.HashSource).
func (n *FrontEndNode) Shards() int { return n.fe.Shards() }

// Hashes returns the state hashes of sector's recent ticks, as the frames
// received carried them (world.HashSource): /world/hashes on a front end
// publishes them to be checked against a re-simulation of the log.
func (n *FrontEndNode) Hashes(sector uint32) *replay.HashHistory { return n.fe.Hashes(sector) }

var (
	_ world.HashSource = (*FrontEndNode)(nil)
	_ world.Prober     = (*FrontEndNode)(nil)
)

// Stats returns what the front end assembled so far.
func (n *FrontEndNode) Stats() FrontEndStats { return n.fe.Stats() }

// SectorStatus is a sector's lease as a front end sees it.
type SectorStatus struct {
	Sector uint32 `json:"sector"`
	Owner  string `json:"owner"` // "" if no worker holds its lease
	Epoch  uint64 `json:"epoch"`
}

// FrontEndStatus is what GET /world answers on a front end.
type FrontEndStatus struct {
	World   uint32         `json:"world"`
	Ready   bool           `json:"ready"`
	Reason  string         `json:"reason,omitempty"`
	NATS    string         `json:"nats"` // the connection's state and server
	Sectors []SectorStatus `json:"sectors"`
	Ticker  string         `json:"ticker"` // the Ticker lease's holder
	Workers []string       `json:"workers"`
	// Latest is the newest tick assembled, AgeMs how long ago.
	Latest uint64  `json:"latest_tick"`
	AgeMs  float64 `json:"latest_tick_age_ms"`
	Ticks  uint64  `json:"ticks_assembled"`
	Filled uint64  `json:"parts_filled"`
	Late   uint64  `json:"parts_late"`
	Stale  uint64  `json:"parts_stale"`
	Bad    uint64  `json:"parts_bad"`
	// HashConflicts: FrontEndStats.HashConflicts.
	HashConflicts uint64  `json:"hash_conflicts"`
	LatP50Ms      float64 `json:"frame_latency_p50_ms"`
	LatP99Ms      float64 `json:"frame_latency_p99_ms"`
	LatMaxMs      float64 `json:"frame_latency_max_ms"`
}

// Ready returns nil when the front end can serve its players: connected
// to NATS, every sector leased by a worker, and a tick assembled within
// Stale.
func (n *FrontEndNode) Ready(ctx context.Context) error {
	_, err := n.Probe(ctx)
	return err
}

// Probe implements world.Prober: Ready, with a summary of the status.
func (n *FrontEndNode) Probe(ctx context.Context) (string, error) {
	st := n.Status(ctx)
	if !st.Ready {
		return "", errors.New(st.Reason)
	}
	return fmt.Sprintf("tick %d assembled %.0f ms ago, %d sectors owned", st.Latest, st.AgeMs, len(st.Sectors)), nil
}

// Status returns the node's status (reading the sectors' leases from NATS).
func (n *FrontEndNode) Status(ctx context.Context) FrontEndStatus {
	s := n.fe.Stats()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	st := FrontEndStatus{World: n.cfg.World, Latest: s.Latest, Ticks: s.Ticks, Filled: s.Filled, Late: s.Late, Stale: s.Stale, Bad: s.Bad, HashConflicts: s.HashConflicts,
		LatP50Ms: ms(s.LatencyP50), LatP99Ms: ms(s.LatencyP99), LatMaxMs: ms(s.LatencyMax), Sectors: []SectorStatus{}}
	c := n.cfg.Conn
	st.NATS = c.Status().String()
	if c.IsConnected() {
		st.NATS += " to " + c.ConnectedUrlRedacted()
	}
	var reasons []string
	if !c.IsConnected() {
		reasons = append(reasons, "not connected to NATS ("+c.Status().String()+")")
	}
	if last := n.lastTick.Load(); last == 0 {
		reasons = append(reasons, "no tick assembled yet")
		st.AgeMs = -1
	} else {
		age := time.Since(time.Unix(0, last))
		st.AgeMs = ms(age)
		if age > n.cfg.Stale {
			reasons = append(reasons, fmt.Sprintf("no tick assembled for %v", age.Round(time.Millisecond)))
		}
	}
	octx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for sct := range uint32(n.cfg.Sectors) {
		w, e, err := n.leases.Owner(octx, sct)
		if err != nil {
			reasons = append(reasons, err.Error())
			break
		}
		st.Sectors = append(st.Sectors, SectorStatus{Sector: sct, Owner: w, Epoch: e})
		if w == "" {
			reasons = append(reasons, fmt.Sprintf("sector %d has no owner", sct))
		}
	}
	st.Ticker, _, _ = n.ticker.Owner(octx, TickerLease)
	st.Workers, _ = n.leases.Workers(octx)
	if len(reasons) == 0 {
		st.Ready = true
	} else {
		st.Reason = reasons[0]
		for _, r := range reasons[1:] {
			st.Reason += "; " + r
		}
	}
	return st
}

// FrontEndReadyHandler answers GET /readyz on a front end: 200 when the
// checks pass and the node is Ready, 503 and the reason otherwise
// (world.ProbeHandler).
func FrontEndReadyHandler(node func() *FrontEndNode, checks ...func() error) http.Handler {
	return world.ProbeHandler(func() world.Prober {
		if n := node(); n != nil {
			return n
		}
		return nil
	}, "the front end", checks...)
}

// FrontEndHashesHandler answers GET /world/hashes on a front end: the
// state hashes its frames carried (world.HashSourceHandler).
func FrontEndHashesHandler(node func() *FrontEndNode) http.Handler {
	return world.HashSourceHandler(func() world.HashSource {
		if n := node(); n != nil {
			return n
		}
		return nil
	})
}

// FrontEndStatusHandler answers GET /world on a front end with its
// FrontEndStatus as JSON (200 whether ready or not).
func FrontEndStatusHandler(node func() *FrontEndNode) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := node()
		if n == nil {
			http.Error(rw, "the front end is not running (starting, or stopped)", http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.Status(r.Context()))
	})
}
