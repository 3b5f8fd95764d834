// Package bots is the load-bot harness: N headless players, each with its
// own QUIC connection and token, sending Broadside commands at a fixed rate
// and measuring what the server gives back.
package bots

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/anoptic/broadside/netcode"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// Config configures a run.
type Config struct {
	// Server is the game server's UDP address.
	Server string
	// TLS trusts the server's certificate.
	TLS *tls.Config
	// Secret mints one token per bot (development); bots are players
	// "bot-1".."bot-N".
	Secret []byte
	// N bots, each sending Rate commands per second for Duration.
	N        int
	Rate     float64
	Duration time.Duration
	// Behaviour: "random" (steer and fire at random) — the only one until
	// state updates reach clients.
	Behaviour string
	Seed      uint64
	// Progress, if set, is called about once a second.
	Progress func(Snapshot)
}

// Snapshot is the state of a run at one moment.
type Snapshot struct {
	Elapsed   time.Duration
	Connected int
	Sent      int64
	Durable   int64
	P50us     int64
	P99us     int64
}

// Report is the outcome of a run.
type Report struct {
	Bots        int              `json:"bots"`
	RatePerBot  float64          `json:"rate_per_bot"`
	DurationSec float64          `json:"duration_s"`
	Sent        int64            `json:"sent"`
	Durable     int64            `json:"durable"`
	RateLimited int64            `json:"rate_limited"`
	Errors      map[string]int64 `json:"errors"`
	// Command sent to durable acknowledgement, microseconds.
	AckP50us  int64 `json:"ack_p50_us"`
	AckP99us  int64 `json:"ack_p99_us"`
	AckP999us int64 `json:"ack_p999_us"`
	AckMaxus  int64 `json:"ack_max_us"`
	// Bytes per second per client, on the wire.
	UpBytesPerSec   float64 `json:"up_bytes_per_sec_per_client"`
	DownBytesPerSec float64 `json:"down_bytes_per_sec_per_client"`
	// Timeline holds per-second ack latency percentiles.
	Timeline []Snapshot `json:"timeline"`
}

type botState struct {
	c       *netcode.Client
	mu      sync.Mutex
	pending map[uint64]time.Time
}

// Run runs the bots and reports.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.N <= 0 || cfg.Rate <= 0 || cfg.Duration <= 0 {
		return Report{}, errors.New("bots: N, Rate and Duration must be positive")
	}
	rep := Report{Bots: cfg.N, RatePerBot: cfg.Rate, Errors: map[string]int64{}}
	var mu sync.Mutex // guards rep, hist, window
	hist := hdrhistogram.New(1, 60_000_000, 3)
	window := hdrhistogram.New(1, 60_000_000, 3)
	countErr := func(kind string) {
		mu.Lock()
		rep.Errors[kind]++
		mu.Unlock()
	}
	// Connect every bot.
	bots := make([]*botState, 0, cfg.N)
	for i := 1; i <= cfg.N; i++ {
		name := fmt.Sprintf("bot-%d", i)
		tok, err := netcode.IssueToken(cfg.Secret, netcode.Claims{Player: name, PlayerID: netcode.PlayerIDFor(name), Expires: time.Now().Add(cfg.Duration + time.Hour)})
		if err != nil {
			return rep, err
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := netcode.Dial(dctx, netcode.ClientConfig{Addr: cfg.Server, TLS: cfg.TLS, Token: tok})
		cancel()
		if err != nil {
			countErr("connect")
			continue
		}
		bots = append(bots, &botState{c: c, pending: map[uint64]time.Time{}})
	}
	defer func() {
		for _, b := range bots {
			b.c.Close()
		}
	}()
	if len(bots) == 0 {
		return rep, fmt.Errorf("bots: no bot could connect to %s", cfg.Server)
	}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var sent, durable, limited int64
	for i, b := range bots {
		// Results reader.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range b.c.Results() {
				b.mu.Lock()
				t0, ok := b.pending[r.Seq]
				delete(b.pending, r.Seq)
				b.mu.Unlock()
				if !ok {
					continue
				}
				mu.Lock()
				switch r.Status {
				case wire.AckDurable:
					us := time.Since(t0).Microseconds()
					hist.RecordValue(max(us, 1))
					window.RecordValue(max(us, 1))
					durable++
				case wire.AckRateLimited:
					limited++
				default:
					rep.Errors["refused"]++
				}
				mu.Unlock()
			}
			if err := b.c.Err(); err != nil && runCtx.Err() == nil {
				if code, _, ok := transport.ErrorCodeOf(err); ok {
					countErr("closed:" + code.String())
				} else {
					countErr("closed")
				}
			}
		}()
		// Sender: a fixed rate with a random phase.
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			interval := time.Duration(float64(time.Second) / cfg.Rate)
			next := time.Now().Add(time.Duration(rng.Int64N(int64(interval) + 1)))
			// Join the game first.
			b.send(wire.GameCommand{Kind: wire.CommandJoin}, &mu, &sent, countErr)
			for {
				select {
				case <-runCtx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(interval)
				b.send(randomCommand(rng), &mu, &sent, countErr)
			}
		}()
	}
	// Progress and timeline, once a second.
	tick := time.NewTicker(time.Second)
	func() {
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				mu.Lock()
				s := Snapshot{Elapsed: time.Since(start).Round(time.Second), Connected: len(bots), Sent: sent, Durable: durable,
					P50us: window.ValueAtQuantile(50), P99us: window.ValueAtQuantile(99)}
				window.Reset()
				rep.Timeline = append(rep.Timeline, s)
				mu.Unlock()
				if cfg.Progress != nil {
					cfg.Progress(s)
				}
			}
		}
	}()
	elapsed := time.Since(start)
	// Let acknowledgements in flight arrive, then close.
	time.Sleep(200 * time.Millisecond)
	var up, down uint64
	for _, b := range bots {
		s, r := b.c.Stats()
		up += s
		down += r
	}
	for _, b := range bots {
		b.c.Close()
	}
	bots = nil
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	rep.DurationSec = elapsed.Seconds()
	rep.Sent, rep.Durable, rep.RateLimited = sent, durable, limited
	rep.AckP50us, rep.AckP99us, rep.AckP999us, rep.AckMaxus = hist.ValueAtQuantile(50), hist.ValueAtQuantile(99), hist.ValueAtQuantile(99.9), hist.Max()
	n := float64(rep.Bots) * elapsed.Seconds()
	rep.UpBytesPerSec, rep.DownBytesPerSec = float64(up)/n, float64(down)/n
	return rep, nil
}

func (b *botState) send(cmd wire.GameCommand, mu *sync.Mutex, sent *int64, countErr func(string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seq, err := b.c.Send(cmd)
	if err != nil {
		countErr("send")
		return
	}
	b.pending[seq] = time.Now()
	mu.Lock()
	*sent++
	mu.Unlock()
}

// randomCommand steers and fires at random: throttle and rudder changes
// most of the time, a broadside now and then.
func randomCommand(rng *rand.Rand) wire.GameCommand {
	switch r := rng.IntN(10); {
	case r < 4:
		return wire.GameCommand{Kind: wire.CommandRudder, Value: int32(rng.IntN(201) - 100)}
	case r < 7:
		return wire.GameCommand{Kind: wire.CommandThrottle, Value: int32(rng.IntN(101))}
	default:
		side := int8(1)
		if rng.IntN(2) == 0 {
			side = -1
		}
		return wire.GameCommand{Kind: wire.CommandFire, Side: side}
	}
}

// ErrorKinds returns the error kinds of a report in a stable order.
func (r *Report) ErrorKinds() []string {
	var ks []string
	for k := range r.Errors {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
