package logbench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// System is one running system under test.
type System interface {
	// Append appends data and returns once the system considers it
	// durable (each contender's durability is described on it). It is
	// called from many goroutines at once; data is never modified.
	Append(ctx context.Context, data []byte) error
	// Settle waits until the background work that earlier appends caused
	// is done, so that the next phase starts clean and a phase is only
	// called sustained if that work kept up. For cmdlog this is ordering:
	// it returns once every acknowledged append has a stable position.
	// Systems that do all their work before acknowledging return at once.
	Settle(ctx context.Context) error
	Close() error
}

// Diagnoser is implemented by systems that can say something about the
// work they did (printed under the report's tables). Diagnostics covers
// the time since its previous call; the runner calls it after each size.
type Diagnoser interface {
	Diagnostics() string
}

// Env is what a contender gets to start in.
type Env struct {
	// Dir is an empty directory the contender may use for its storage;
	// it is removed after the contender closed.
	Dir    string
	Logger *slog.Logger
}

// Contender is a named system the benchmark runs.
type Contender struct {
	Name string
	// Describe says what an acknowledged append means, in one line.
	Describe string
	Start    func(ctx context.Context, env Env) (System, error)
}

// Contenders returns every contender, in the order they run and are
// reported: ours first (lazylog-memory is the reference for the ratios),
// then the baselines, then the floor.
func Contenders() []Contender {
	return []Contender{
		{Name: "lazylog-memory", Describe: "cmdlog, 3 sequencing replicas + 2 Pebble shards; acked when in memory on all 3 replicas (1 RTT)",
			Start: func(ctx context.Context, env Env) (System, error) { return startLazylog(ctx, env, false) }},
		{Name: "lazylog-fsync", Describe: "cmdlog as above; acked when in the fsynced WAL of all 3 replicas (1 RTT + group commit)",
			Start: func(ctx context.Context, env Env) (System, error) { return startLazylog(ctx, env, true) }},
		{Name: "lazylog-jetstream", Describe: describeLazylogJetStream, Start: startLazylogJetStream},
		{Name: "corfu", Describe: "Corfu-style: sequencer token + client-driven chain write to 3 Pebble replicas, no fsync (4 RTT)",
			Start: func(ctx context.Context, env Env) (System, error) { return startCorfu(ctx, env, false) }},
		{Name: "corfu-fsync", Describe: "Corfu-style as above; every replica fsyncs before acking (4 RTT + 3 fsyncs in series)",
			Start: func(ctx context.Context, env Env) (System, error) { return startCorfu(ctx, env, true) }},
		{Name: "jetstream-r3", Describe: "NATS JetStream, 3-node embedded cluster, R3 memory stream, publish with ack (client on the stream leader)",
			Start: startJetStream},
		{Name: "jetstream-r3-sync", Describe: "NATS JetStream as above with an R3 file-storage stream, every write synced (sync_interval: always)",
			Start: startJetStreamSync},
		{Name: "quic-floor", Describe: "one round trip fanned out to 3 echo servers, one long-lived stream each (the floor of a 1-RTT append)",
			Start: startQUICFloor},
	}
}

// Reference is the contender the ratios are relative to.
const Reference = "lazylog-memory"

// ContenderNames returns the names of every contender.
func ContenderNames() []string {
	var names []string
	for _, c := range Contenders() {
		names = append(names, c.Name)
	}
	return names
}

// selectContenders returns the named contenders in the standard order
// (all of them for an empty list).
func selectContenders(names []string) ([]Contender, error) {
	all := Contenders()
	if len(names) == 0 {
		return all, nil
	}
	for _, n := range names {
		if !slices.ContainsFunc(all, func(c Contender) bool { return c.Name == n }) {
			return nil, fmt.Errorf("logbench: unknown contender %q (have %s)", n, strings.Join(ContenderNames(), ", "))
		}
	}
	var out []Contender
	for _, c := range all {
		if slices.Contains(names, c.Name) {
			out = append(out, c)
		}
	}
	return out, nil
}
