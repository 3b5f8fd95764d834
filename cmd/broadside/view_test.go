package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/web"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/bsr"
)

// TestLineageWhyRecording: 'lineage why --recording' answers from the
// lineage a recording carries, as the match's own index does.
func TestLineageWhyRecording(t *testing.T) {
	ctx := context.Background()
	m, err := viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: 3, Ships: 12, Ticks: 300})
	if err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(t.TempDir(), "m.bsr")
	if _, err := m.WriteRecording(ctx, rec, bsr.SnapshotPolicy{}); err != nil {
		t.Fatal(err)
	}
	ship := broadside.ShipID(5)
	want, err := m.Index().Why(lineage.AnyShard, ship, 250, 2)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCLI(t, "lineage", "why", "--recording", rec, "--entity", "ship:5", "--tick", "250", "--depth", "2", "--limit", "0", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var v lineage.WhyView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	causes := want.Causes(0)
	if v.Commands != len(causes) || len(v.Causes) != len(causes) || len(v.Chain) != len(want.Chain()) || v.Commands == 0 {
		t.Fatalf("recording: %d commands, chain %d; the match: %d, %d", v.Commands, len(v.Chain), len(causes), len(want.Chain()))
	}
	for i, c := range causes {
		if v.Causes[i].Pos != c.Pos || v.Causes[i].Tick != c.Tick {
			t.Fatalf("cause %d: pos %d tick %d, the match's pos %d tick %d", i, v.Causes[i].Pos, v.Causes[i].Tick, c.Pos, c.Tick)
		}
	}
	if _, _, err := runCLI(t, "lineage", "why", "--recording", filepath.Join(t.TempDir(), "none.bsr"), "--entity", "ship:5", "--tick", "1"); err == nil {
		t.Fatal("a missing recording answered")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestViewServesRecording runs 'broadside view FILE' and fetches the page's
// configuration and the recording.
func TestViewServesRecording(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, web.WasmFile), []byte("\x00asm"), 0o644)
	os.WriteFile(filepath.Join(dir, web.WasmExecFile), []byte("//"), 0o644)
	rec := filepath.Join(t.TempDir(), "a.bsr")
	os.WriteFile(rec, []byte("not really a recording"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	root := newRoot()
	out := &syncBuffer{}
	root.SetOut(out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"view", "--listen", "127.0.0.1:0", "--web-dir", dir, rec})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	addrRE := regexp.MustCompile(`viewer: http://([0-9.:]+)/`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		cancel()
		t.Fatalf("no address printed: %q (%v)", out.String(), <-done)
	}
	resp, err := http.Get("http://" + addr + "/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var c web.Config
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if c.Recording != "recordings/a.bsr" {
		t.Fatalf("config %+v", c)
	}
	resp, err = http.Get("http://" + addr + "/" + c.Recording)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "not really a recording" {
		t.Fatalf("recording: %q", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
