package hostile

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// GoodPlayer plays steadily while the attacks run, and times every
// command from its sending to its acknowledgement. It runs in a process
// of its own (GoodPlayerMain), as a real player's client would: in the
// attacker's process it would wait for the attacker's goroutines.
type GoodPlayer struct {
	c        *client.Client
	interval time.Duration

	mu       sync.Mutex
	sentAt   map[uint64]time.Time
	acked    map[uint64]time.Duration // seq -> ack delay
	refused  map[uint64]wire.AckStatus
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

// Command is one of the good player's commands: when it was sent, and
// its outcome (Delay: until its acknowledgement).
type Command struct {
	Seq   uint64
	Sent  time.Time
	Delay time.Duration
	// Status is "acked", "refused: STATUS" or "unanswered".
	Status string
}

// Played is what the good player did: its commands and why its session
// ended early, if it did.
type Played struct {
	Commands []Command
	Err      string
}

// Stop stops sending, waits up to wait for the last acknowledgements,
// closes the session and returns what was played.
func (g *GoodPlayer) Stop(wait time.Duration) Played {
	close(g.stopSend)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		g.mu.Lock()
		pending := len(g.sentAt) - len(g.acked) - len(g.refused)
		g.mu.Unlock()
		if pending == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := g.c.Err()
	g.c.Close()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		err = g.sendErr
	}
	var p Played
	if err != nil {
		p.Err = err.Error()
	}
	for seq, at := range g.sentAt {
		c := Command{Seq: seq, Sent: at, Status: "unanswered"}
		if d, ok := g.acked[seq]; ok {
			c.Delay, c.Status = d, "acked"
		} else if st, ok := g.refused[seq]; ok {
			c.Status = "refused: " + st.String()
		}
		p.Commands = append(p.Commands, c)
	}
	return p
}

// The environment of GoodPlayerMain.
const (
	EnvGoodAddr     = "BROADSIDE_HOSTILE_ADDR"
	EnvGoodCA       = "BROADSIDE_HOSTILE_CA"
	EnvGoodToken    = "BROADSIDE_HOSTILE_TOKEN"
	EnvGoodInterval = "BROADSIDE_HOSTILE_INTERVAL"
)

// GoodPlayerMain is the good player's process: it connects to
// $BROADSIDE_HOSTILE_ADDR (trusting the CA file $BROADSIDE_HOSTILE_CA)
// with the token $BROADSIDE_HOSTILE_TOKEN, writes "playing" to out, sends
// a command every $BROADSIDE_HOSTILE_INTERVAL until in ends, then writes
// what it played (Played, JSON).
func GoodPlayerMain(in io.Reader, out io.Writer) error {
	interval, err := time.ParseDuration(os.Getenv(EnvGoodInterval))
	if err != nil {
		return fmt.Errorf("hostile: %s: %w", EnvGoodInterval, err)
	}
	tlsc, err := transport.ClientTLS(os.Getenv(EnvGoodCA))
	if err != nil {
		return err
	}
	tlsc.ServerName = "localhost"
	g, err := PlayGood(context.Background(), os.Getenv(EnvGoodAddr), tlsc, os.Getenv(EnvGoodToken), interval)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "playing")
	io.Copy(io.Discard, in)
	return json.NewEncoder(out).Encode(g.Stop(10 * time.Second))
}

// GoodReport is what the good player saw.
type GoodReport struct {
	// Sent commands; Acked of them acknowledged (durable or replicated),
	// Refused answered otherwise, Unanswered never.
	Sent, Acked, Refused, Unanswered int
	// InWindow commands were sent during the attacks; P50, P99 and Max
	// are their acknowledgement delays (an unanswered one counts as an
	// hour).
	InWindow      int
	P50, P99, Max time.Duration
	// AckedSeqs are the acknowledged commands' sequence numbers,
	// UnansweredSeqs those of the commands never answered.
	AckedSeqs, UnansweredSeqs []uint64
	// Err is why the session ended, if it did.
	Err string
}

// Report summarises p, with the delays of the commands sent between from
// and to.
func (p Played) Report(from, to time.Time) GoodReport {
	r := GoodReport{Sent: len(p.Commands), Err: p.Err}
	var in []time.Duration
	for _, c := range p.Commands {
		d := c.Delay
		switch c.Status {
		case "acked":
			r.Acked++
			r.AckedSeqs = append(r.AckedSeqs, c.Seq)
		case "unanswered":
			r.Unanswered++
			r.UnansweredSeqs = append(r.UnansweredSeqs, c.Seq)
			d = time.Hour
		default:
			r.Refused++
			d = time.Hour
		}
		if !c.Sent.Before(from) && c.Sent.Before(to) {
			in = append(in, d)
		}
	}
	h := report.DurationsOf(in)
	r.InWindow, r.P50, r.P99, r.Max = len(in), h.Quantile(0.5), h.Quantile(0.99), h.Max()
	return r
}

// Worst returns how many commands were sent between from and to, and the
// longest acknowledgement delay among them (an hour for one never
// acknowledged).
func (p Played) Worst(from, to time.Time) (n int, worst time.Duration) {
	for _, c := range p.Commands {
		if c.Sent.Before(from) || !c.Sent.Before(to) {
			continue
		}
		n++
		d := c.Delay
		if c.Status != "acked" {
			d = time.Hour
		}
		worst = max(worst, d)
	}
	return n, worst
}

// SentAt returns when command seq was sent.
func (p Played) SentAt(seq uint64) time.Time {
	for _, c := range p.Commands {
		if c.Seq == seq {
			return c.Sent
		}
	}
	return time.Time{}
}
