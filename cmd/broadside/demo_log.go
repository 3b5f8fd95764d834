package main

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
	"github.com/spf13/cobra"
)

type logDemoOptions struct {
	clients     int
	concurrency int
	duration    time.Duration
	size        int
	fsync       bool
	dir         string
}

func newDemoLogCmd() *cobra.Command {
	var o logDemoOptions
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Run a 3-replica, 2-shard command log on loopback QUIC, crash its leader, read everything back",
		Long: `Start a command log cluster in this process — 3 sequencing replicas and 2 shards,
each with its own QUIC endpoint on 127.0.0.1, shards on Pebble — append from
several clients, stop the sequencing leader mid-run (a crash: it loses its
memory) and restart it, then read the whole log back and check that every
acknowledged append is there exactly once.`,
		Example: `  broadside demo log
  broadside demo log --duration 3s --clients 2 --fsync`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.clients, "clients", 3, "appending clients")
	f.IntVar(&o.concurrency, "concurrency", 16, "concurrent appends per client")
	f.DurationVar(&o.duration, "duration", 6*time.Second, "how long to append")
	f.IntVar(&o.size, "size", 100, "record size in bytes")
	f.BoolVar(&o.fsync, "fsync", false, "sequencing replicas in fsync durability (write-ahead log synced before acknowledging)")
	f.StringVar(&o.dir, "dir", "", "data directory (default: a temporary one, removed afterwards)")
	return cmd
}

func runLogDemo(ctx context.Context, w io.Writer, o logDemoOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "broadside-demo-log-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca, err := transport.NewDevCA()
	if err != nil {
		return err
	}
	server, client, err := ca.MutualTLS("localhost")
	if err != nil {
		return err
	}
	group := mesh.NewGroup(server, client, log)
	defer group.Close()
	durability, mode := seq.Memory, "memory"
	if o.fsync {
		durability, mode = seq.Fsync, "fsync"
	}
	disk := &cmdlog.DiskStorage{Dir: dir, Logger: log}
	defer disk.Close()
	co := coord.NewMemory()
	lc, err := cmdlog.StartLocal(ctx, cmdlog.LocalConfig{
		Coordinator: co, Network: group, Durability: durability, Logger: log,
		Timing: node.Timing{Tick: 5 * time.Millisecond}, Core: seq.Config{SuspectTicks: 40},
		NewStorage: disk.NewStorage, NewWAL: disk.NewWAL,
	})
	if err != nil {
		return err
	}
	defer lc.Close()
	fmt.Fprintf(w, "Broadside demo: a command log on loopback QUIC\n")
	fmt.Fprintf(w, "cluster: sequencing replicas %v, shards %v (Pebble under %s), stripe unit %d, durability %s\n",
		lc.Replicas(), lc.Layout().Shards, dir, lc.Layout().StripeUnit, mode)
	v, _, _ := co.Get(ctx)
	fmt.Fprintf(w, "view %d: members %v, leader %d\n\n", v.Number, v.Members, v.Leader)

	hist := hdrhistogram.New(1, 60_000_000, 3)
	var histMu sync.Mutex
	var acked, failed atomic.Int64
	ackedData := make(map[string]bool)
	var dataMu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	var clientsList []*cmdlog.Client
	for c := range o.clients {
		cl := lc.NewClient(cmdlog.ClientConfig{OnAppendLatency: func(d time.Duration) {
			histMu.Lock()
			hist.RecordValue(d.Microseconds())
			histMu.Unlock()
		}})
		clientsList = append(clientsList, cl)
		defer cl.Close()
		for g := range o.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				payload := make([]byte, o.size)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					tag := fmt.Sprintf("c%d-g%d-%d", c, g, i)
					copy(payload, tag)
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := cl.Append(actx, append([]byte(nil), payload...))
					cancel()
					if err != nil {
						failed.Add(1)
						continue
					}
					acked.Add(1)
					dataMu.Lock()
					ackedData[string(payload[:len(tag)])] = true
					dataMu.Unlock()
				}
			}()
		}
	}
	// Crash the leader a third of the way in, restart it at two thirds.
	leader := v.Leader
	time.Sleep(o.duration / 3)
	fmt.Fprintf(w, "t=%-6s %d appends acknowledged; crashing sequencing leader %d (it loses its memory)\n",
		time.Since(start).Round(time.Millisecond), acked.Load(), leader)
	crashAt := time.Now()
	lc.StopNode(leader)
	var newView msg.ViewRecord
	for time.Since(crashAt) < 10*time.Second {
		nv, _, err := co.Get(ctx)
		if err == nil && nv.Active() && nv.Number > v.Number {
			newView = nv
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Fprintf(w, "t=%-6s view change: view %d active after %v, members %v, leader %d, starts at position %d\n",
		time.Since(start).Round(time.Millisecond), newView.Number, time.Since(crashAt).Round(time.Millisecond),
		newView.Members, newView.Leader, newView.StartGP)
	time.Sleep(o.duration / 3)
	fmt.Fprintf(w, "t=%-6s %d appends acknowledged; restarting replica %d\n", time.Since(start).Round(time.Millisecond), acked.Load(), leader)
	lc.StartNode(leader)
	time.Sleep(o.duration / 3)
	close(stop)
	wg.Wait()
	el := time.Since(start)
	nv, _, _ := co.Get(ctx)
	fmt.Fprintf(w, "t=%-6s stopped appending; view %d: members %v, leader %d\n\n", el.Round(time.Millisecond), nv.Number, nv.Members, nv.Leader)

	reader := clientsList[0]
	tail, err := reader.CheckTail(ctx)
	if err != nil {
		return fmt.Errorf("check tail: %w", err)
	}
	readStart := time.Now()
	sub := reader.Subscribe(1)
	seen := make(map[string]uint64, tail)
	dups := 0
	var sample []msg.Entry
	for sub.Position() <= tail {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := sub.Next(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("read position %d: %w", sub.Position(), err)
		}
		key := string(e.Record.Data)
		if i := indexByte0(e.Record.Data); i >= 0 {
			key = string(e.Record.Data[:i])
		}
		if _, dup := seen[key]; dup {
			dups++
		}
		seen[key] = e.Pos
		if e.Pos <= 3 || e.Pos+2 > tail {
			sample = append(sample, e)
		}
	}
	readTook := time.Since(readStart)
	lost := 0
	for d := range ackedData {
		if _, ok := seen[d]; !ok {
			lost++
		}
	}
	fmt.Fprintf(w, "appends:   %d acknowledged by every sequencing replica (%d timed out during the failover and were retried or abandoned)\n", acked.Load(), failed.Load())
	fmt.Fprintf(w, "           %.0f appends/s over %v with %d clients x %d concurrent appends of %d bytes\n",
		float64(acked.Load())/el.Seconds(), el.Round(time.Millisecond), o.clients, o.concurrency, o.size)
	fmt.Fprintf(w, "latency:   p50 %dus  p99 %dus  p99.9 %dus  max %dus (call to durable on all replicas)\n",
		hist.ValueAtQuantile(50), hist.ValueAtQuantile(99), hist.ValueAtQuantile(99.9), hist.Max())
	fmt.Fprintf(w, "read back: positions 1..%d in %v\n", tail, readTook.Round(time.Millisecond))
	for _, e := range sample {
		n := indexByte0(e.Record.Data)
		if n < 0 {
			n = len(e.Record.Data)
		}
		fmt.Fprintf(w, "           position %-7d record %v %q\n", e.Pos, e.Record.ID, e.Record.Data[:n])
	}
	fmt.Fprintf(w, "check:     %d lost, %d duplicated\n", lost, dups)
	if lost > 0 || dups > 0 {
		return fmt.Errorf("%d acknowledged appends lost, %d duplicated", lost, dups)
	}
	return nil
}

func indexByte0(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
