package hostile

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/wire"
)

// GoodPlayer plays steadily while the attacks run, and times every
// command from its sending to its acknowledgement.
type GoodPlayer struct {
	c        *client.Client
	interval time.Duration

	mu       sync.Mutex
	sentAt   map[uint64]time.Time
	acked    map[uint64]time.Duration // seq -> ack delay
	refused  map[uint64]wire.AckStatus
	sentN    int
	window   [2]time.Time // the attack window: delays of commands sent in it
	sendErr  error
	stopSend chan struct{}
	done     chan struct{}
}

// PlayGood connects the good player (token) to addr and sends a command
// every interval until Stop.
func PlayGood(ctx context.Context, addr string, tlsc *tls.Config, token string, interval time.Duration) (*GoodPlayer, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, client.Config{Addr: addr, TLS: tlsc, Token: token})
	if err != nil {
		return nil, fmt.Errorf("hostile: good player: %w", err)
	}
	g := &GoodPlayer{c: c, interval: interval, sentAt: map[uint64]time.Time{}, acked: map[uint64]time.Duration{},
		refused: map[uint64]wire.AckStatus{}, stopSend: make(chan struct{}), done: make(chan struct{})}
	go g.read()
	go g.play()
	return g, nil
}

// PlayerID is the id the server welcomed the good player with.
func (g *GoodPlayer) PlayerID() uint32 { return g.c.Welcome().PlayerID }

// Session is the good player's session id.
func (g *GoodPlayer) Session() uint64 { return g.c.Session() }

func (g *GoodPlayer) play() {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-g.stopSend:
			return
		case <-g.c.Done():
			return
		case <-t.C:
		}
		// Record the command before sending it (its acknowledgement may
		// come back before Send returns), and never hold the lock in Send.
		seq := uint64(i + 1)
		g.mu.Lock()
		g.sentAt[seq] = time.Now()
		g.sentN++
		g.mu.Unlock()
		if _, err := g.c.Send(wire.GameCommand{Seq: seq, Kind: wire.CommandRudder, Value: int32(i%5 - 2)}); err != nil {
			g.mu.Lock()
			g.sendErr = err
			g.mu.Unlock()
			return
		}
	}
}

func (g *GoodPlayer) read() {
	defer close(g.done)
	for {
		select {
		case r, ok := <-g.c.Results():
			if !ok {
				return
			}
			g.mu.Lock()
			if at, ok := g.sentAt[r.Seq]; ok {
				if r.Status == wire.AckDurable || r.Status == wire.AckReplicated {
					g.acked[r.Seq] = time.Since(at)
				} else {
					g.refused[r.Seq] = r.Status
				}
			}
			g.mu.Unlock()
		case <-g.c.Updates(): // state: taken, not needed
		case <-g.c.Done():
			return
		}
	}
}

// MarkWindow starts (start true) or ends the attack window: Report's
// delays are those of commands sent inside it.
func (g *GoodPlayer) MarkWindow(start bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if start {
		g.window[0] = time.Now()
	} else {
		g.window[1] = time.Now()
	}
}

// Worst returns how many commands were sent between from and to, and the
// longest acknowledgement delay among them (an hour for one never
// acknowledged).
func (g *GoodPlayer) Worst(from, to time.Time) (n int, worst time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for seq, at := range g.sentAt {
		if at.Before(from) || !at.Before(to) {
			continue
		}
		n++
		d, ok := g.acked[seq]
		if !ok {
			d = time.Hour
		}
		worst = max(worst, d)
	}
	return n, worst
}

// GoodReport is what the good player saw.
type GoodReport struct {
	// Sent commands; Acked of them acknowledged (durable or replicated),
	// Refused answered otherwise, Unanswered never.
	Sent, Acked, Refused, Unanswered int
	// InWindow commands were sent during the attacks; P50, P99 and Max
	// are their acknowledgement delays.
	InWindow      int
	P50, P99, Max time.Duration
	// AckedSeqs are the acknowledged commands' sequence numbers.
	AckedSeqs []uint64
	// Err is why the session ended, if it did.
	Err error
}

// Stop stops sending, waits up to wait for the last acknowledgements,
// closes the session and reports.
func (g *GoodPlayer) Stop(wait time.Duration) GoodReport {
	close(g.stopSend)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		g.mu.Lock()
		pending := g.sentN - len(g.acked) - len(g.refused)
		g.mu.Unlock()
		if pending == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := g.c.Err()
	if err == nil {
		err = g.sendErr
	}
	g.c.Close()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	r := GoodReport{Sent: g.sentN, Acked: len(g.acked), Refused: len(g.refused), Err: err}
	r.Unanswered = r.Sent - r.Acked - r.Refused
	var in []time.Duration
	for seq, d := range g.acked {
		r.AckedSeqs = append(r.AckedSeqs, seq)
		at := g.sentAt[seq]
		if !at.Before(g.window[0]) && (g.window[1].IsZero() || at.Before(g.window[1])) {
			in = append(in, d)
		}
	}
	// A command sent in the window and never acknowledged counts as
	// slower than any acknowledged one.
	for seq, at := range g.sentAt {
		if _, ok := g.acked[seq]; !ok && !at.Before(g.window[0]) && (g.window[1].IsZero() || at.Before(g.window[1])) {
			in = append(in, time.Hour)
		}
	}
	h := report.DurationsOf(in)
	r.InWindow, r.P50, r.P99, r.Max = len(in), h.Quantile(0.5), h.Quantile(0.99), h.Max()
	return r
}
