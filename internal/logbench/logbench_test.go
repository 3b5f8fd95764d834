package logbench

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunTinyAllContenders runs every contender in a tiny mode (a few
// hundred appends each) and checks that each produced results, that the
// table, the JSON (with its documented keys) and the PNG come out. It
// asserts nothing about speed.
func TestRunTinyAllContenders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every contender's cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := tinyOptions()
	opts.Dir = t.TempDir()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	names := ContenderNames()
	if len(names) < 5 {
		t.Fatalf("only %d contenders: %v", len(names), names)
	}
	if len(rep.Results) != len(names)*len(opts.Sizes) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(names)*len(opts.Sizes))
	}
	for _, want := range []string{"lazylog-memory", "lazylog-fsync", "corfu", "jetstream-r3", "quic-floor"} {
		found := false
		for _, r := range rep.Results {
			if r.Name != want {
				continue
			}
			found = true
			h := r.Headline()
			if r.Err != nil || h.Ops == 0 || h.Mean <= 0 || h.P50 <= 0 || h.P99 <= 0 || h.P999 <= 0 {
				t.Errorf("%s: headline %+v, err %v", want, h, r.Err)
			}
			if len(r.Closed) != len(opts.ClosedLoop) {
				t.Errorf("%s: %d closed-loop phases, want %d", want, len(r.Closed), len(opts.ClosedLoop))
			}
			if len(r.Steps) == 0 || r.Steps[0].Ops == 0 || r.Steps[0].OpsPerSec <= 0 {
				t.Errorf("%s: open-loop steps %+v", want, r.Steps)
			}
		}
		if !found {
			t.Errorf("contender %s missing from the results", want)
		}
	}

	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	for _, n := range names {
		if !strings.Contains(table.String(), n) {
			t.Errorf("table lacks %s:\n%s", n, table.String())
		}
	}

	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "b.json")
	if err := rep.WriteJSONFile(jsonPath); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("JSON does not parse as {\"contenders\": [...]}: %v\n%s", err, raw)
	}
	rows := doc["contenders"]
	if len(doc) != 1 || len(rows) != len(rep.Results) {
		t.Fatalf("JSON has %d top-level keys and %d rows:\n%s", len(doc), len(rows), raw)
	}
	keys := []string{"name", "record_bytes", "mean_us", "p50_us", "p99_us", "p999_us", "max_ops"}
	for _, row := range rows {
		if len(row) != len(keys) {
			t.Errorf("row has keys %v, want exactly %v", row, keys)
		}
		for _, k := range keys {
			v, ok := row[k]
			if !ok {
				t.Errorf("row %v lacks %q", row, k)
				continue
			}
			switch k {
			case "name":
				continue
			case "max_ops":
				// Whether a rate counts as sustained depends on the
				// machine's speed, which a test must not assert.
				if f, ok := v.(float64); !ok || f < 0 {
					t.Errorf("%v: max_ops = %v", row["name"], v)
				}
				continue
			}
			if f, _ := v.(float64); f <= 0 {
				t.Errorf("%v: %s = %v, want > 0", row["name"], k, v)
			}
		}
	}

	pngPath := filepath.Join(dir, "b.png")
	if err := rep.WritePNGFile(pngPath); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pngPath); err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("PNG: %d bytes, %v", len(b), err)
	}
}

// TestOpenLoopCountsLateAppends checks the open loop's accounting against
// a system that takes a fixed time per append with one append at a time:
// offered faster than it can serve, the step must come out unsustained,
// with latencies that include the queueing (not just the service time).
func TestOpenLoopCountsLateAppends(t *testing.T) {
	sys := &serialSystem{service: 2 * time.Millisecond, sem: make(chan struct{}, 1)}
	opts := defaults()
	opts.StepDuration = 200 * time.Millisecond
	// 1000/s offered, 500/s served at best.
	st := openLoop(context.Background(), sys, []byte("x"), 1000, opts.StepDuration, 64, 2*time.Second)
	if st.Ops == 0 {
		t.Fatalf("no appends completed: %+v", st)
	}
	if st.P99 < 50*time.Millisecond {
		t.Errorf("p99 %v: the queueing behind a 500/s server offered 1000/s for 200ms is missing", st.P99)
	}
	step := Step{Target: 1000, Stats: st}
	if ok, _ := judge(step, nil, opts); ok {
		t.Errorf("step judged sustained: %+v", st)
	}
}

// serialSystem serves one append at a time, each taking service.
type serialSystem struct {
	service time.Duration
	sem     chan struct{}
}

func (s *serialSystem) Append(ctx context.Context, _ []byte) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(s.service)
	<-s.sem
	return nil
}

func (s *serialSystem) Settle(context.Context) error { return nil }
func (s *serialSystem) Close() error                 { return nil }

// tinyOptions are options for tests: a few hundred appends per contender.
func tinyOptions() Options {
	o := defaults()
	o.Sizes = []int{100}
	o.Warmup = 20
	o.ClosedLoop = []ClosedLoopPhase{{1, 50}, {8, 200}}
	o.ClosedLoopMaxTime = time.Second
	o.Rates = []float64{1_000}
	o.StepDuration = 200 * time.Millisecond
	o.DrainTime = 500 * time.Millisecond
	return o
}
