package bots

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReportOutputs(t *testing.T) {
	rep := Report{Bots: 3, RatePerBot: 10, DurationSec: 2, AckStatus: "durable", Sent: 60, Acked: 59,
		Errors: map[string]int64{"timeout": 2, "closed": 1}, FirstErrors: map[string]string{"timeout": "tick 7"},
		Timeline: []Snapshot{{Elapsed: time.Second, P50us: 900, P99us: 2000, AppliedP99us: 40000}, {Elapsed: 2 * time.Second, P50us: 800, P99us: 1500, AppliedP99us: 30000}}}
	var b bytes.Buffer
	rep.WriteSummary(&b, "captain")
	text := b.String()
	if !strings.HasPrefix(text, "bots:        3 x 10 commands/s for 2.0s (captain)\ncommands:    60 sent, 59 acknowledged durable") {
		t.Fatalf("summary:\n%s", text)
	}
	if !strings.HasSuffix(text, "errors:      closed: 1\nerrors:      timeout: 2 (first: tick 7)\n") {
		t.Fatalf("errors:\n%s", text)
	}
	b.Reset()
	Report{}.WriteSummary(&b, "random")
	if !strings.HasSuffix(b.String(), "errors:      none\n") {
		t.Fatalf("no errors:\n%s", b.String())
	}

	b.Reset()
	Snapshot{Elapsed: 3 * time.Second, Connected: 3, Sent: 9, AppliedP99us: 45000}.WriteProgress(&b)
	if !strings.HasPrefix(b.String(), "\r    3s  3 bots  sent 9 ") || !strings.Contains(b.String(), "applied p99 45ms") {
		t.Fatalf("progress: %q", b.String())
	}

	dir := t.TempDir()
	if err := rep.WriteJSONFile(filepath.Join(dir, "r.json")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "r.json"))
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil || back.Sent != 60 || len(back.Timeline) != 2 || back.Errors["timeout"] != 2 {
		t.Fatalf("JSON: %v %+v", err, back)
	}
	png := filepath.Join(dir, "r.png")
	if err := rep.WritePNG(png); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("PNG: %v", err)
	}
}
