package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSeekTiny runs the seek benchmark on a tiny match: the table and
// the JSON keys the issue asks for.
func TestBenchSeekTiny(t *testing.T) {
	js := filepath.Join(t.TempDir(), "seek.json")
	out, _, err := runCLI(t, "bench", "seek", "--ships", "20", "--minutes", "0.2", "--seeks", "20", "--anchor-seeks", "4",
		"--json", js, "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"broadside", "unreal-30s", "cs2-60s", "p99 ms", "bytes/min"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seek_p50_ms", "seek_p99_ms", "bytes_per_minute"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Fatalf("%s = %v in %s", k, res[k], b)
		}
	}
	if _, ok := res["anchors"].(map[string]any)["unreal-30s"]; !ok {
		t.Fatalf("no anchors in %s", b)
	}
}
