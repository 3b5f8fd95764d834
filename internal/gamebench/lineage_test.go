package gamebench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunLineageTiny runs the lineage benchmark on a small world: the
// report's table and the JSON headline keys.
func TestRunLineageTiny(t *testing.T) {
	js := filepath.Join(t.TempDir(), "lineage.json")
	var out strings.Builder
	err := RunLineage(context.Background(), LineageConfig{Ships: 20, Triples: 10, MatchTicks: 3*10 + LineageWarmup + 30,
		Queries: 20, Depth: 4, Seed: 1, Output: Output{JSONPath: js}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lineage.Nop", "Log, background seal", "headline: overhead_pct"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bytes_per_tick", "why_p99_us"} {
		if v, ok := rep[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v in %s", k, rep[k], b)
		}
	}
	if err := RunLineage(context.Background(), LineageConfig{Ships: 1, Triples: 1, MatchTicks: 1000}, &out); err == nil {
		t.Error("one ship accepted")
	}
}
