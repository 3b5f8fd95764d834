package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoCommand runs 'broadside demo' as a user would, with --no-faults
// in short (demo/match tests the faults), and checks what it prints and
// the --json file it writes.
func TestDemoCommand(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "d.json")
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"demo", "--duration", "4s", "--bots", "5", "--no-faults", "--dir", dir, "--json", jsonFile})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"determinism verified", "lost           0", "broadside replay verify"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo does not print %q:\n%s", want, out.String())
		}
	}
	var fromFile map[string]any
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fromFile); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acked", "applied", "lost", "recoveries", "recovery_ms", "determinism_ok", "recording"} {
		if _, ok := fromFile[k]; !ok {
			t.Errorf("--json lacks key %q", k)
		}
	}
	if fromFile["lost"] != 0.0 || fromFile["determinism_ok"] != true {
		t.Errorf("--json: lost %v, determinism_ok %v", fromFile["lost"], fromFile["determinism_ok"])
	}
}
