package inspect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/inspect"
	"github.com/anoptic/broadside/replay/world"
)

var game = inspect.Game{TickRate: broadside.TickRate, SchemaVersion: broadside.SchemaVersion, FieldValues: broadside.FieldValues}

// record writes a bot match of 120 ticks and opens it.
func record(t *testing.T) (*bsr.Reader, func(uint32) (replay.TableSim, error), bsr.RecordStats, int64) {
	t.Helper()
	cfg := broadside.Config{Seed: 5, Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 2, Islands: 2}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := broadside.NewBotMatch(cfg, 8, 5, world.LocalConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	g, err := broadside.NewGame(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.bsr")
	st, size, err := world.Record(context.Background(), path, g, world.DefaultID, m.Source(120), bsr.RecordConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r, g2, _, err := broadside.OpenRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, g2.NewSim, st, size
}

func TestReports(t *testing.T) {
	r, newSim, st, size := record(t)

	ex := game.NewExport("m.bsr", size, st)
	if ex.LastTick != 120 || ex.Ticks != 120 || ex.Bytes != size || ex.BytesPerMinute != float64(size)/(120.0/30/60) {
		t.Fatalf("export: %+v", ex)
	}
	var b bytes.Buffer
	game.PrintExport(&b, ex)
	if !strings.HasPrefix(b.String(), "wrote m.bsr: ticks 1..120 (0:04.0 of play), ") || !strings.Contains(b.String(), "stopped: end of log") {
		t.Fatalf("export text:\n%s", b.String())
	}

	b.Reset()
	game.PrintInfo(&b, r.Info(), "1000 × 1000 m in 4 sectors, 2 islands")
	for _, want := range []string{"of world 1, seed 5, 1000 × 1000 m in 4 sectors, 2 islands\n", "  ticks 1..120: 0:04.0 of play, from the start of the match", "seek index: present", "  chunk"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("info lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "warning:") {
		t.Fatalf("a schema warning for this build's recording:\n%s", b.String())
	}
	info := inspect.InfoJSON(r.Info(), "cfg")
	if info["last_tick"] != uint64(120) || info["shards"] != uint32(4) || info["config"] != "cfg" {
		t.Fatalf("info JSON: %v", info)
	}

	b.Reset()
	if err := game.Verify(context.Background(), &b, io.Discard, r, newSim, inspect.VerifyOptions{NoProgress: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "OK: ticks 1..120 (0:04.0 of play) × 4 sectors re-simulated") {
		t.Fatalf("verify: %s", b.String())
	}
	b.Reset()
	if err := game.Verify(context.Background(), &b, io.Discard, r, newSim, inspect.VerifyOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil || v["ok"] != true || v["ticks"].(float64) != 120 || v["signed"] != nil {
		t.Fatalf("verify JSON: %v %s", err, b.String())
	}

	sk, err := bsr.NewSeeker(r, newSim)
	if err != nil {
		t.Fatal(err)
	}
	if err := sk.Seek(77); err != nil {
		t.Fatal(err)
	}
	s := inspect.SeekOf(sk)
	if s.Tick != 77 || s.Restored == 0 {
		t.Fatalf("seek: %+v", s)
	}
	b.Reset()
	game.PrintSeek(&b, r, s)
	if !strings.HasPrefix(b.String(), "tick 77 (0:02.5 into the match; the recording holds 0..120)\nseek took ") {
		t.Fatalf("seek text: %s", b.String())
	}
}

// TestPrintVerifyDivergence: a divergence names the tick, sector, entity
// and field, with the game's rendering of the field or else its bytes.
func TestPrintVerifyDivergence(t *testing.T) {
	r, _, _, _ := record(t)
	res := bsr.VerifyResult{FirstTick: 60, Shard: 2, Want: 0xab, Got: 0xcd, DiffTick: 90, Table: 3, Slot: 1, Offset: 16,
		Entity: "ship:3", Field: "hull", WantBytes: []byte{100, 0}, GotBytes: []byte{99, 0}, Detail: "detail"}
	var b bytes.Buffer
	noFields := inspect.Game{TickRate: 30}
	noFields.PrintVerify(&b, r, res)
	want := "DIVERGED at tick 60 (0:02.0 into the match) in sector 2\n" +
		"  state hash: recorded 0xab, re-simulated 0xcd\n" +
		"  first difference at the snapshot of tick 90: ship:3, field hull (bytes from offset 16: recorded 64 00, re-simulated 63 00)\n" +
		"  detail\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	game.PrintVerify(&b, r, res)
	if !strings.Contains(b.String(), "field hull: recorded 100, re-simulated 99\n") {
		t.Fatalf("the game's field values are not used:\n%s", b.String())
	}
	m := inspect.VerifyJSON(res, &bsr.SignedResult{Key: "k", Checkpoints: []bsr.Checkpoint{{Size: 9}}})
	if m["first_tick"] != uint64(60) || m["ok"] != false || m["field"] != "hull" || m["signed"].(map[string]any)["tree_size"] != int64(9) {
		t.Fatalf("verify JSON: %v", m)
	}
	b.Reset()
	inspect.Game{SchemaVersion: broadside.SchemaVersion + 1}.SchemaWarning(&b, r.Header())
	if !strings.HasPrefix(b.String(), "warning: recorded with game schema version") {
		t.Fatalf("no schema warning: %q", b.String())
	}
}
