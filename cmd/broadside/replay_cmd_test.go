package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
)

// runCLI runs the CLI in-process.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestReplayExportInfoVerifySeek(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.bsr")
	out, _, err := runCLI(t, "replay", "export", "--bots", "24", "--minutes", "0.25", "-o", path, "--no-progress", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ex map[string]any
	if err := json.Unmarshal([]byte(out), &ex); err != nil || ex["last_tick"].(float64) != 450 || ex["stopped"] != "end of log" {
		t.Fatalf("export: %v %s", err, out)
	}

	out, _, err = runCLI(t, "replay", "info", path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if info["game"] != broadside.GameName || info["shards"].(float64) != 4 || info["last_tick"].(float64) != 450 || info["indexed"] != true {
		t.Fatalf("info: %s", out)
	}
	if out, _, err = runCLI(t, "replay", "info", path); err != nil || !strings.Contains(out, "ticks 1..450") {
		t.Fatalf("info: %v\n%s", err, out)
	}

	out, _, err = runCLI(t, "replay", "verify", path, "--no-progress")
	if err != nil || !strings.HasPrefix(out, "OK: ticks 1..450") {
		t.Fatalf("verify: %v\n%s", err, out)
	}

	out, _, err = runCLI(t, "replay", "seek", path, "--tick", "321", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var sk seekSummary
	if err := json.Unmarshal([]byte(out), &sk); err != nil || sk.Tick != 321 || len(sk.Sectors) != 4 || sk.Ships == 0 || len(sk.Listed) != 5 {
		t.Fatalf("seek: %v %s", err, out)
	}
	if out, _, err = runCLI(t, "replay", "seek", path, "--tick", "9999"); !errors.Is(err, bsr.ErrOutOfRange) {
		t.Fatalf("seek past the end: %v %s", err, out)
	}

	// Re-record with a fixed schedule from the recording itself.
	again := filepath.Join(t.TempDir(), "again.bsr")
	if _, _, err := runCLI(t, "replay", "export", "--from", path, "-o", again, "--full-every", "90", "--no-progress"); err != nil {
		t.Fatal(err)
	}
	if out, _, err = runCLI(t, "replay", "verify", again, "--no-progress"); err != nil {
		t.Fatalf("verify the re-recording: %v\n%s", err, out)
	}
}

func TestReplayForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.bsr")
	os.WriteFile(path, []byte("not a recording"), 0o644)
	for _, sub := range []string{"info", "verify", "seek"} {
		args := []string{"replay", sub, path}
		if sub == "seek" {
			args = append(args, "--tick", "1")
		}
		if _, _, err := runCLI(t, args...); !errors.Is(err, bsr.ErrNotRecording) {
			t.Fatalf("%s: %v", sub, err)
		}
	}
}

// hullBugSector is a sector with a bug: at one tick it takes a point of
// hull off one ship. Its recordings do not verify with the real game.
type hullBugSector struct {
	*broadside.Sector
	at uint64
}

func (s *hullBugSector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	outs := s.Sector.Step(tick, cmds, rec)
	if tick == s.at {
		ships := s.Tables().Tables()[2]
		for i := ships.NextLive(0); i >= 0; i = ships.NextLive(i + 1) {
			if hull := ships.Row(i).I16(16); hull > 1 {
				ships.Mut(i).SetI16(16, hull-1)
				break
			}
		}
	}
	return outs
}

func (s *hullBugSector) Hash() uint64 { return s.Tables().Hash() }

// TestReplayVerifyDivergence: verify of a recording made by a buggy game
// names the tick, the ship and its hull, and exits with status 1.
func TestReplayVerifyDivergence(t *testing.T) {
	game := defaultRecordGame()
	m := botLog(t, game, 24, 400, 3)
	path := filepath.Join(t.TempDir(), "bug.bsr")
	g, err := broadside.NewGame(game, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := bsr.Create(path, g.Header(world.DefaultID), bsr.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bsr.Record(context.Background(), bsr.RecordConfig{Source: m, Writer: w,
		NewSim: func(shard uint32) (replay.TableSim, error) {
			s, err := broadside.NewSector(game, int(shard))
			if shard == 2 {
				return &hullBugSector{Sector: s, at: 200}, err
			}
			return s, err
		}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "replay", "verify", path, "--no-progress")
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v\n%s", err, out.String())
	}
	for _, want := range []string{"DIVERGED at tick 200", "in sector 2", "ship:", "field hull: recorded "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

// TestStoredLogSource reads a stopped embedded log's shard stores back in
// position order, and records it.
func TestStoredLogSource(t *testing.T) {
	game := defaultRecordGame()
	entries := botEntries(t, botLog(t, game, 16, 120, 5))
	dir := filepath.Join(t.TempDir(), "data")
	const stripe = 64
	for i := range 2 {
		st, err := shardstore.Open(filepath.Join(dir, "log", "shard-"+strconv.Itoa(101+i)), shardstore.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		var w shard.Writes
		for _, e := range entries {
			if int((e.Pos-1)/stripe)%2 == i {
				w.Puts = append(w.Puts, e)
			}
		}
		w.Meta = &shard.Meta{Epoch: 1, StableGP: uint64(len(entries))}
		if err := st.Apply(w); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	sl, err := world.OpenStored(dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e, err := sl.Next(context.Background())
		if errors.Is(err, replay.ErrEndOfLog) {
			if i != len(entries) {
				t.Fatalf("%d entries of %d", i, len(entries))
			}
			break
		}
		if err != nil || e.Pos != entries[i].Pos || !bytes.Equal(e.Record.Data, entries[i].Record.Data) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	sl.Close()
	path := filepath.Join(t.TempDir(), "stored.bsr")
	out, _, err := runCLI(t, "replay", "export", "--log-dir", dir, "-o", path, "--no-progress")
	if err != nil || !strings.Contains(out, "ticks 1..120") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if _, err := world.OpenStored(t.TempDir(), quietLogger()); err == nil {
		t.Fatal("an empty directory opened as a log")
	}
}

// TestRecordMatch records a finished match's log and opens it again.
func TestRecordMatch(t *testing.T) {
	game := defaultRecordGame()
	entries := botEntries(t, botLog(t, game, 8, 90, 6))
	path := filepath.Join(t.TempDir(), "demo.bsr")
	g, err := broadside.NewGame(game, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, size, err := recordMatch(context.Background(), path, g, world.DefaultID, replay.NewSliceSource(entries, 1), bsr.RecordConfig{ToTick: 60})
	if err != nil || size == 0 {
		t.Fatal(size, err)
	}
	r, _, cfg, err := openRecording(path)
	if err != nil || cfg != game || r.LastTick() != 60 {
		t.Fatalf("%v %+v", err, cfg)
	}
	r.Close()
}

// botLog returns the log of a bot match of ships ships, ticks long.
func botLog(t *testing.T, game broadside.Config, ships int, ticks, seed uint64) replay.Source {
	t.Helper()
	m, err := broadside.NewBotMatch(game, ships, seed, world.LocalConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m.Source(ticks)
}

// botEntries is the whole log of a bot match (botLog).
func botEntries(t *testing.T, src replay.Source) []msg.Entry {
	t.Helper()
	var entries []msg.Entry
	for {
		e, err := src.Next(context.Background())
		if err != nil {
			return entries
		}
		entries = append(entries, e)
	}
}
