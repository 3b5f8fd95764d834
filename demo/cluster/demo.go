package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// DemoOptions configure Demo ('broadside demo --cluster').
type DemoOptions struct {
	// Executable is the broadside binary the processes run (required).
	Executable string
	// Dir is the working directory; empty: a new temporary one, removed
	// after a run whose checks all passed (kept, and named, otherwise).
	Dir string
	// Bots, Rate: as Options.
	Bots int
	Rate float64
	// Duration is the least length of the match: the bots play on after
	// the faults until it has passed.
	Duration time.Duration
	Out      io.Writer
}

// Demo starts a cluster of separate processes on loopback, plays a match
// with a fault of every role (Play, with the paused worker), stops it and
// prints what happened and the checks' outcome.
func Demo(ctx context.Context, o DemoOptions) (Report, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	dir, temp := o.Dir, o.Dir == ""
	if temp {
		var err error
		if dir, err = os.MkdirTemp("", "broadside-cluster-"); err != nil {
			return Report{}, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return Report{}, err
	}
	fmt.Fprintf(out, "Broadside demo --cluster: one world on separate processes on loopback, in %s\n", dir)
	fmt.Fprintf(out, "  3 NATS servers (broadside nats: user, password, TLS; R3 buckets), 3 sequencing replicas and 2 shards (broadside logd),\n")
	fmt.Fprintf(out, "  3 sector workers (broadside sector; w3 --standby) and 2 front ends (broadside serve --world), %d bots split across them\n", or(o.Bots, 12))
	start := time.Now()
	c, err := Start(ctx, Config{Dir: dir, Command: func(args ...string) *exec.Cmd { return orphanProof(exec.Command(o.Executable, args...)) }})
	if err != nil {
		return Report{}, fmt.Errorf("%w (the processes' logs are in %s)", err, dir)
	}
	fmt.Fprintf(out, "every process started in %.1fs; NATS at %s\n", time.Since(start).Seconds(), c.NATSURL)
	rep, err := Play(ctx, c, Options{Bots: o.Bots, Rate: o.Rate, Pause: true, Out: out, MinDuration: o.Duration})
	c.Close()
	if err == nil {
		err = rep.Verdict()
	}
	rep.Summary(out)
	if err != nil {
		return rep, fmt.Errorf("%w (the processes' logs are in %s)", err, dir)
	}
	if temp {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(out, "the processes' logs and data are in %s\n", dir)
	}
	return rep, nil
}

// Summary prints the report for people.
func (r Report) Summary(w io.Writer) {
	fmt.Fprintf(w, "\nsummary\n")
	var sent, reconnects, resent int64
	for _, b := range r.Bots {
		sent, reconnects, resent = sent+b.Sent, reconnects+b.Reconnects, resent+b.Resent
	}
	fmt.Fprintf(w, "  faults         SIGKILL of %d roles (%v)", len(r.Kills), r.Kills)
	if r.Paused {
		fmt.Fprintf(w, ", and a worker SIGSTOPped past its leases then SIGCONTed: %d frames past its successor's claim", r.Zombie)
	}
	fmt.Fprintf(w, "; each restarted\n")
	fmt.Fprintf(w, "  bots           sent %d commands, %d acknowledged; %d reconnections, %d commands resent\n", sent, r.Acked, reconnects, resent)
	fmt.Fprintf(w, "  lost           %d (of %d acknowledged; %d duplicated)\n", r.Lost, r.Acked, r.Duplicated)
	for _, tk := range r.Takeovers {
		mode := "restore"
		if tk.Standby {
			mode = "standby"
		}
		fmt.Fprintf(w, "  takeover       sector %d on %s (%s) live %v after the failure: lease expiry %v, restore %v, replay %v; %d ticks missing from the frames\n",
			tk.Sector, tk.Worker, mode, tk.Total.Round(time.Millisecond), tk.Expiry.Round(time.Millisecond), tk.Restore.Round(time.Millisecond), tk.Replay.Round(time.Millisecond), tk.Gap)
	}
	fmt.Fprintf(w, "  front end      %s listening again %v after its SIGKILL, ready (/readyz) after %v, its bots acknowledged again after %v\n", r.FrontEnd,
		r.FrontEndRestart.Round(time.Millisecond), r.FrontEndReady.Round(time.Millisecond), r.FrontEndBack.Round(time.Millisecond))
	fmt.Fprintf(w, "  log and NATS   longest wait for an acknowledgement in the 3 s after the NATS node's SIGKILL %v, after the leader's %v\n", r.NATSBack.Round(time.Millisecond), r.LeaderBack.Round(time.Millisecond))
	fmt.Fprintf(w, "  determinism    %d published frames checked against a re-simulation of the whole log (%d positions, %d ticks x %d sectors): %d differ; %d sector-ticks reached no frame this demo received\n",
		r.Checked, r.Positions, r.Ticks, r.Sectors, r.Mismatched, r.Missing)
	fmt.Fprintf(w, "%s\n", r.Line())
}
