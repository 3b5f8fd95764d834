package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
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
	// The view's output, read as it comes: the address line, then the rest
	// (drained so that the command never blocks on it).
	pr, pw := io.Pipe()
	defer pw.Close()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"view", "--listen", "127.0.0.1:0", "--web-dir", dir, rec})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		addrRE := regexp.MustCompile(`viewer: http://([0-9.:]+)/`)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m[1]
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		cancel()
		t.Fatalf("view ended before printing its address: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("no address printed (%v)", <-done)
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
