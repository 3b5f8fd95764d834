// Package hostile attacks a running Broadside deployment the way issue 16's
// review did, and records how each attack was turned away: hostile players
// on the game server's QUIC endpoint (garbage, oversized frames, floods
// before Hello, handshakes without streams, stream and datagram floods,
// forged, expired and replayed tokens, another player's id, a spectator
// session with a player token, junk padding), hostile admin requests
// (no credentials, a foreign Host), hostile files (.bsr recordings and
// lineage ranges) handed to the tools, and hostile log peers (a client
// certificate claiming a node's id, forged StartView, Store and Trim).
//
// An attack counts as rejected only when the target says so in a way a
// client can see: an application error code closing the connection, an
// HTTP status, a decoder's error. Whether the target also kept serving
// (a good client's acknowledgements), kept its memory bounded and stored
// nothing it should not have is for the caller to check around the
// attacks (the hostile suite, cmd/broadside/hostile_test.go).
package hostile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Outcome is how one attack ended.
type Outcome struct {
	// Class is the attack class of issue 16's list; Name the attack.
	Class, Name string
	// Rejected: the target refused the attack with a visible error (How).
	Rejected bool
	// How is what the target answered (a close code and reason, an HTTP
	// status, a decoder error), or, when not rejected, what went wrong.
	How string
	// Start is when the attack began, Took how long it ran.
	Start time.Time
	Took  time.Duration
}

// String is one line: class, name, verdict and how.
func (o Outcome) String() string {
	verdict := "REJECTED"
	if !o.Rejected {
		verdict = "NOT REJECTED"
	}
	return fmt.Sprintf("%-28s %-52s %s (%s) in %v", o.Class, o.Name, verdict, o.How, o.Took.Round(time.Millisecond))
}

// Attack is one attack on a target.
type Attack struct {
	Class, Name string
	// Run carries the attack out and tells how the target answered:
	// rejected with the evidence, or not (and why not).
	Run func(ctx context.Context) (rejected bool, how string)
}

// Run runs attacks one after the other, each with a deadline of perAttack,
// and returns their outcomes (logf, if set, gets one line each).
func Run(ctx context.Context, attacks []Attack, perAttack time.Duration, logf func(string, ...any)) []Outcome {
	out := make([]Outcome, 0, len(attacks))
	for _, a := range attacks {
		actx, cancel := context.WithTimeout(ctx, perAttack)
		start := time.Now()
		rejected, how := a.Run(actx)
		cancel()
		o := Outcome{Class: a.Class, Name: a.Name, Rejected: rejected, How: how, Start: start, Took: time.Since(start)}
		if logf != nil {
			logf("%s", o)
		}
		out = append(out, o)
	}
	return out
}

// Count returns how many outcomes there are, how many were rejected, and
// how many distinct classes they cover.
func Count(outs []Outcome) (attacks, rejected, classes int) {
	seen := map[string]bool{}
	for _, o := range outs {
		attacks++
		if o.Rejected {
			rejected++
		}
		seen[o.Class] = true
	}
	return attacks, rejected, len(seen)
}

// The attack classes of issue 16.
const (
	ClassGarbage     = "garbage and oversized frames"
	ClassPreHello    = "floods before Hello"
	ClassNoStream    = "handshakes without streams"
	ClassStreamFlood = "stream and datagram floods"
	ClassTokens      = "forged/expired/replayed tokens"
	ClassImpersonate = "another player's id"
	ClassSpectator   = "spectator with a player token"
	ClassPadding     = "junk padding"
	ClassAdmin       = "admin without credentials"
	ClassFiles       = "hostile .bsr and lineage files"
	ClassLogPeer     = "hostile log peers"
)

// RSS returns the resident set size of process pid, in bytes (Linux:
// VmRSS of /proc/PID/status).
func RSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("hostile: VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("hostile: no VmRSS in /proc/%d/status", pid)
}

// RSSSampler samples a process's RSS every interval until stopped, and
// keeps the highest.
type RSSSampler struct {
	pid    int
	mu     sync.Mutex
	peak   int64
	err    error
	stop   chan struct{}
	done   chan struct{}
	sample int
}

// SampleRSS starts sampling pid's RSS every interval.
func SampleRSS(pid int, interval time.Duration) *RSSSampler {
	s := &RSSSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.take()
			select {
			case <-s.stop:
				s.take()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *RSSSampler) take() {
	v, err := RSS(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.sample++
	s.peak = max(s.peak, v)
}

// Stop stops sampling and returns the highest RSS seen, in bytes, and
// how many samples were taken.
func (s *RSSSampler) Stop() (peak int64, samples int, err error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.sample, s.err
}

// randomBytes returns n bytes of a fixed pseudo-random pattern (garbage
// that is the same in every run).
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if bytes.Contains([]byte(s), []byte(sub)) {
			return true
		}
	}
	return false
}

// ProcessCPU returns the CPU time (user and system) process pid used so
// far (Linux: /proc/PID/stat, in clock ticks of 1/100 s).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("hostile: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("hostile: /proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("hostile: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
