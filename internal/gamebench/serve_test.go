package gamebench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
)

var tinyGame = broadside.Config{Seed: 1, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 4}

// TestRunServeTiny runs both contenders with a few bots: a row each, every
// command acknowledged, and the JSON rows.
func TestRunServeTiny(t *testing.T) {
	js := filepath.Join(t.TempDir(), "serve.json")
	var out strings.Builder
	err := RunServe(context.Background(), ServeConfig{Game: tinyGame, Bots: []int{2}, Rate: 5, Duration: 2 * time.Second,
		Dir: t.TempDir(), Output: Output{JSONPath: js}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "failed") || strings.Contains(out.String(), "not every command") {
		t.Fatalf("a run failed:\n%s", out.String())
	}
	var rep struct{ Results []serveResult }
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want memory and fsync:\n%s", len(rep.Results), b)
	}
	for _, r := range rep.Results {
		if r.Acked == 0 || r.Acked != r.Sent || r.TicksPerSec <= 0 || r.AckP99us <= 0 {
			t.Errorf("%+v", r)
		}
	}
	if _, err := selectServeContenders([]string{"nope"}); err == nil {
		t.Error("an unknown contender accepted")
	}
}

// TestRunRestartTiny builds a 3-second match, kills and reopens it once:
// the reopened server ticks and acknowledges again.
func TestRunRestartTiny(t *testing.T) {
	js := filepath.Join(t.TempDir(), "restart.json")
	var out strings.Builder
	err := RunRestart(context.Background(), RestartConfig{Game: tinyGame, Minutes: []float64{0.05}, Runs: 1, Players: 4,
		Dir: t.TempDir(), Output: Output{JSONPath: js}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Lengths []restartLengthJSON }
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Lengths) != 1 || rep.Lengths[0].Ticks != 90 || rep.Lengths[0].LogEntries < 90 ||
		len(rep.Lengths[0].FirstTickMs) != 1 || rep.Lengths[0].FirstTickMs[0] <= 0 || rep.Lengths[0].FirstAckMs[0] <= 0 {
		t.Fatalf("%s\n%s", b, out.String())
	}
}

// TestServeTableKeepsLateFailures: a run that measured and then failed (a
// server that did not drain in time) keeps its figures in both tables,
// marked, with the failure under the first; a run that measured nothing
// prints only its failure.
func TestServeTableKeepsLateFailures(t *testing.T) {
	cs := []ServeContender{{Name: "memory"}, {Name: "fsync"}}
	results := []serveResult{
		{Contender: "memory", Bots: 3, Err: "dial: refused"},
		{Contender: "fsync", Bots: 3, Sent: 900, Acked: 890, AckP50us: 1500, TicksPerSec: 29.5, Err: "stop: drain: deadline exceeded",
			PerPlayerTickUs: map[string]float64{"quic": 40}},
	}
	var out strings.Builder
	writeServeTable(&out, ServeConfig{Rate: 30, Duration: time.Second, Bots: []int{3}}, cs, results)
	s := out.String()
	for _, want := range []string{"failed: dial: refused", "fsync*", "890", "29.5", "failed after measuring: fsync/3 bots (row marked *): stop: drain: deadline exceeded", "40.0"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
