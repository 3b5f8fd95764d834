// Package failover is 'broadside demo log': a command log cluster in one
// process — 3 sequencing replicas and 2 shards, each with its own QUIC
// endpoint on 127.0.0.1, shards on Pebble — appended to by several
// clients while its sequencing leader is crashed (it loses its memory) and
// restarted, then read back whole to check that every acknowledged append
// is there exactly once.
package failover

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/netcode/transport"
)

// Options configure the demo.
type Options struct {
	// Clients is the number of appending clients.
	Clients int
	// Concurrency is the number of concurrent appends per client.
	Concurrency int
	// Duration is how long to append; the leader is crashed a third of
	// the way in and restarted at two thirds.
	Duration time.Duration
	// Size is the record size in bytes.
	Size int
	// Fsync runs the sequencing replicas in fsync durability (write-ahead
	// log synced before acknowledging) instead of memory.
	Fsync bool
	// Dir is the data directory (default: a temporary one, removed
	// afterwards).
	Dir string
}

// Report is what the demo counted.
type Report struct {
	// Acked and Failed count the appends acknowledged and those that
	// timed out (during the failover).
	Acked, Failed int64
	// Tail is the log's tail when the appends stopped; positions 1..Tail
	// were read back.
	Tail uint64
	// Lost counts acknowledged appends missing from the log read back,
	// Duplicated records read back more than once.
	Lost, Duplicated int
}

// Run runs the demo and narrates it to w. It returns an error if an
// acknowledged append was lost or duplicated.
func Run(ctx context.Context, w io.Writer, o Options) (Report, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Clients < 1 {
		return Report{}, fmt.Errorf("need at least one client (it also reads the log back)")
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "broadside-demo-log-")
		if err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	c, err := startCluster(ctx, w, dir, o.Fsync)
	if err != nil {
		return Report{}, err
	}
	defer c.close()

	l := startLoad(ctx, c.local, o)
	defer l.closeClients()
	c.crashLeader(ctx, w, l, o.Duration)
	l.stopAndWait()
	el := time.Since(l.start)
	nv, _, _ := c.co.Get(ctx)
	fmt.Fprintf(w, "t=%-6s stopped appending; view %d: members %v, leader %d\n\n", el.Round(time.Millisecond), nv.Number, nv.Members, nv.Leader)

	rb, err := readBack(ctx, l.clients[0])
	if err != nil {
		return Report{}, err
	}
	rep := Report{Acked: l.acked.Load(), Failed: l.failed.Load(), Tail: rb.tail, Duplicated: rb.dups}
	for d := range l.ackedData {
		if _, ok := rb.seen[d]; !ok {
			rep.Lost++
		}
	}
	printSummary(w, o, rep, l, rb, el)
	if rep.Lost > 0 || rep.Duplicated > 0 {
		return rep, fmt.Errorf("%d acknowledged appends lost, %d duplicated", rep.Lost, rep.Duplicated)
	}
	return rep, nil
}

// cluster is the demo's cluster and what it runs on.
type cluster struct {
	group *mesh.Group
	disk  *cmdlog.DiskStorage
	co    *coord.Memory
	local *cmdlog.LocalCluster
	// view is the view the cluster started in.
	view msg.ViewRecord
}

// startCluster starts 3 sequencing replicas and 2 shards on loopback QUIC,
// with their storage under dir, and prints the cluster and its first view.
func startCluster(ctx context.Context, w io.Writer, dir string, fsync bool) (*cluster, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	server, client, err := ca.MutualTLS("localhost")
	if err != nil {
		return nil, err
	}
	c := &cluster{group: mesh.NewGroup(server, client, log), co: coord.NewMemory()}
	durability, mode := seq.Memory, "memory"
	if fsync {
		durability, mode = seq.Fsync, "fsync"
	}
	c.disk = &cmdlog.DiskStorage{Dir: dir, Logger: log}
	c.local, err = cmdlog.StartLocal(ctx, cmdlog.LocalConfig{
		Coordinator: c.co, Network: c.group, Durability: durability, Logger: log,
		Timing: node.Timing{Tick: 5 * time.Millisecond}, Core: seq.Config{SuspectTicks: 40},
		NewStorage: c.disk.NewStorage, NewWAL: c.disk.NewWAL,
	})
	if err != nil {
		c.local = nil
		c.close()
		return nil, err
	}
	fmt.Fprintf(w, "Broadside demo: a command log on loopback QUIC\n")
	fmt.Fprintf(w, "cluster: sequencing replicas %v, shards %v (Pebble under %s), stripe unit %d, durability %s\n",
		c.local.Replicas(), c.local.Layout().Shards, dir, c.local.Layout().StripeUnit, mode)
	c.view, _, _ = c.co.Get(ctx)
	fmt.Fprintf(w, "view %d: members %v, leader %d\n\n", c.view.Number, c.view.Members, c.view.Leader)
	return c, nil
}

// close stops the cluster, then its storage and network.
func (c *cluster) close() {
	if c.local != nil {
		c.local.Close()
	}
	c.disk.Close()
	c.group.Close()
}

// crashLeader lets the load run a third of d, crashes the first view's
// leader and waits for the next view, restarts the replica at two thirds
// and lets the load run to d, narrating to w.
func (c *cluster) crashLeader(ctx context.Context, w io.Writer, l *load, d time.Duration) {
	leader := c.view.Leader
	time.Sleep(d / 3)
	fmt.Fprintf(w, "t=%-6s %d appends acknowledged; crashing sequencing leader %d (it loses its memory)\n",
		time.Since(l.start).Round(time.Millisecond), l.acked.Load(), leader)
	crashAt := time.Now()
	c.local.StopNode(leader)
	var newView msg.ViewRecord
	for time.Since(crashAt) < 10*time.Second {
		nv, _, err := c.co.Get(ctx)
		if err == nil && nv.Active() && nv.Number > c.view.Number {
			newView = nv
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Fprintf(w, "t=%-6s view change: view %d active after %v, members %v, leader %d, starts at position %d\n",
		time.Since(l.start).Round(time.Millisecond), newView.Number, time.Since(crashAt).Round(time.Millisecond),
		newView.Members, newView.Leader, newView.StartGP)
	time.Sleep(d / 3)
	fmt.Fprintf(w, "t=%-6s %d appends acknowledged; restarting replica %d\n", time.Since(l.start).Round(time.Millisecond), l.acked.Load(), leader)
	c.local.StartNode(leader)
	time.Sleep(d / 3)
}

// load is the appending clients and what they counted.
type load struct {
	clients []*cmdlog.Client
	stop    chan struct{}
	wg      sync.WaitGroup
	start   time.Time

	acked, failed atomic.Int64
	histMu        sync.Mutex
	hist          *hdrhistogram.Histogram
	dataMu        sync.Mutex
	// ackedData holds the tag of every acknowledged append.
	ackedData map[string]bool
}

// startLoad starts o.Clients clients of lc with o.Concurrency appenders
// each, every append tagged with its client, appender and serial.
func startLoad(ctx context.Context, lc *cmdlog.LocalCluster, o Options) *load {
	l := &load{
		stop:      make(chan struct{}),
		start:     time.Now(),
		hist:      hdrhistogram.New(1, 60_000_000, 3),
		ackedData: make(map[string]bool),
	}
	for c := range o.Clients {
		cl := lc.NewClient(cmdlog.ClientConfig{OnAppendLatency: func(d time.Duration) {
			l.histMu.Lock()
			l.hist.RecordValue(d.Microseconds())
			l.histMu.Unlock()
		}})
		l.clients = append(l.clients, cl)
		for g := range o.Concurrency {
			l.wg.Add(1)
			go l.appendLoop(ctx, cl, fmt.Sprintf("c%d-g%d-", c, g), o.Size)
		}
	}
	return l
}

// appendLoop appends records of size bytes tagged prefix and a serial
// until the load stops.
func (l *load) appendLoop(ctx context.Context, cl *cmdlog.Client, prefix string, size int) {
	defer l.wg.Done()
	payload := make([]byte, size)
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		tag := fmt.Sprintf("%s%d", prefix, i)
		copy(payload, tag)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cl.Append(actx, append([]byte(nil), payload...))
		cancel()
		if err != nil {
			l.failed.Add(1)
			continue
		}
		l.acked.Add(1)
		l.dataMu.Lock()
		l.ackedData[string(payload[:len(tag)])] = true
		l.dataMu.Unlock()
	}
}

// stopAndWait stops the appenders and waits for them.
func (l *load) stopAndWait() {
	close(l.stop)
	l.wg.Wait()
}

func (l *load) closeClients() {
	for _, cl := range l.clients {
		cl.Close()
	}
}

// readResult is the log read back.
type readResult struct {
	tail uint64
	// seen maps each record's tag to its position.
	seen   map[string]uint64
	dups   int
	sample []msg.Entry
	took   time.Duration
}

// readBack reads positions 1 to the tail with reader, counting duplicated
// tags and keeping the first and last few entries as a sample.
func readBack(ctx context.Context, reader *cmdlog.Client) (readResult, error) {
	tail, err := reader.CheckTail(ctx)
	if err != nil {
		return readResult{}, fmt.Errorf("check tail: %w", err)
	}
	r := readResult{tail: tail, seen: make(map[string]uint64, tail)}
	readStart := time.Now()
	sub := reader.Subscribe(1)
	for sub.Position() <= tail {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := sub.Next(rctx)
		cancel()
		if err != nil {
			return readResult{}, fmt.Errorf("read position %d: %w", sub.Position(), err)
		}
		key := string(tagOf(e.Record.Data))
		if _, dup := r.seen[key]; dup {
			r.dups++
		}
		r.seen[key] = e.Pos
		if e.Pos <= 3 || e.Pos+2 > tail {
			r.sample = append(r.sample, e)
		}
	}
	r.took = time.Since(readStart)
	return r, nil
}

// printSummary prints the appends, their latency, the read back and the
// check.
func printSummary(w io.Writer, o Options, rep Report, l *load, rb readResult, el time.Duration) {
	fmt.Fprintf(w, "appends:   %d acknowledged by every sequencing replica (%d timed out during the failover and were retried or abandoned)\n", rep.Acked, rep.Failed)
	fmt.Fprintf(w, "           %.0f appends/s over %v with %d clients x %d concurrent appends of %d bytes\n",
		float64(rep.Acked)/el.Seconds(), el.Round(time.Millisecond), o.Clients, o.Concurrency, o.Size)
	fmt.Fprintf(w, "latency:   p50 %dus  p99 %dus  p99.9 %dus  max %dus (call to durable on all replicas)\n",
		l.hist.ValueAtQuantile(50), l.hist.ValueAtQuantile(99), l.hist.ValueAtQuantile(99.9), l.hist.Max())
	fmt.Fprintf(w, "read back: positions 1..%d in %v\n", rb.tail, rb.took.Round(time.Millisecond))
	for _, e := range rb.sample {
		fmt.Fprintf(w, "           position %-7d record %v %q\n", e.Pos, e.Record.ID, tagOf(e.Record.Data))
	}
	fmt.Fprintf(w, "check:     %d lost, %d duplicated\n", rep.Lost, rep.Duplicated)
}

// tagOf is a record's tag: its data up to the first zero byte.
func tagOf(data []byte) []byte {
	for i, c := range data {
		if c == 0 {
			return data[:i]
		}
	}
	return data
}
