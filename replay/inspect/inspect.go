// Package inspect writes what the replay tools find in .bsr recordings for
// people and scripts: the text and JSON reports of 'replay export', 'info',
// 'verify' and 'seek'. It knows no game: what a report says of the game
// (its tick rate, its schema version, how to read a differing field) comes
// in a Game.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// Game is what the reports need of the game a recording is of.
type Game struct {
	// TickRate is the game's ticks per second (play time is ticks over it).
	TickRate uint64
	// SchemaVersion is this build's version of the game's rules: a
	// recording made by another gets a warning.
	SchemaVersion uint16
	// FieldValues, if not nil, renders the recorded and re-simulated
	// bytes of a differing field (ok false: it cannot, and the bytes are
	// shown).
	FieldValues func(table uint32, offset int, want, got []byte) (string, string, bool)
}

// ErrDiverged is returned by Verify when the recording does not
// re-simulate.
var ErrDiverged = errors.New("the recording does not re-simulate")

// SchemaWarning says when a recording was made by another version of the
// game's rules (re-simulating it may then diverge).
func (g Game) SchemaWarning(w io.Writer, h bsr.Header) {
	if h.SchemaVersion != g.SchemaVersion {
		fmt.Fprintf(w, "warning: recorded with game schema version %d, this build is version %d: re-simulation may diverge\n", h.SchemaVersion, g.SchemaVersion)
	}
}

// Export is the result of recording a match ('replay export --json').
type Export struct {
	Path           string  `json:"path"`
	Bytes          int64   `json:"bytes"`
	BaseTick       uint64  `json:"base_tick"`
	FirstTick      uint64  `json:"first_tick"`
	LastTick       uint64  `json:"last_tick"`
	Ticks          uint64  `json:"ticks"`
	Entries        uint64  `json:"entries"`
	FullSnapshots  int     `json:"full_snapshots"`
	DeltaSnapshots int     `json:"delta_snapshots"`
	BytesPerMinute float64 `json:"bytes_per_minute"`
	TicksPerSecond float64 `json:"ticks_per_sec"`
	Stopped        string  `json:"stopped"`
	Seconds        float64 `json:"seconds"`
}

// NewExport describes the recording at path, size bytes, that st reports.
func (g Game) NewExport(path string, size int64, st bsr.RecordStats) Export {
	res := Export{Path: path, Bytes: size, BaseTick: st.BaseTick, FirstTick: st.FirstTick, LastTick: st.LastTick,
		Ticks: st.Ticks, Entries: st.Entries, FullSnapshots: st.FullSnapshots, DeltaSnapshots: st.DeltaSnapshots,
		Stopped: st.Stopped, Seconds: st.Took.Seconds()}
	if st.Ticks > 0 {
		res.BytesPerMinute = float64(size) / (float64(st.Ticks) / float64(g.TickRate) / 60)
		res.TicksPerSecond = float64(st.Ticks+st.FastForward) / st.Took.Seconds()
	}
	return res
}

// PrintExport writes e for people.
func (g Game) PrintExport(w io.Writer, e Export) {
	fmt.Fprintf(w, "wrote %s: ticks %d..%d (%s of play), %s (%s per minute)\n", e.Path, e.FirstTick, e.LastTick,
		report.PlayTime(e.Ticks, g.TickRate), report.Bytes(float64(e.Bytes)), report.Bytes(e.BytesPerMinute))
	fmt.Fprintf(w, "  %d log entries, %d full and %d delta snapshots; recorded in %.1f s (%.0f ticks/s); stopped: %s\n",
		e.Entries, e.FullSnapshots, e.DeltaSnapshots, e.Seconds, e.TicksPerSecond, e.Stopped)
}

// InfoJSON is 'replay info --json': in, with config, the game's
// configuration the recording carries.
func InfoJSON(in bsr.Info, config any) map[string]any {
	chunks := map[string]any{}
	for _, k := range in.Chunks {
		chunks[k.Kind] = map[string]any{"chunks": k.Chunks, "raw_bytes": k.Raw, "stored_bytes": k.Stored}
	}
	return map[string]any{
		"path": in.Path, "game": in.Header.Game, "schema_version": in.Header.SchemaVersion, "tick_rate": in.Header.TickRate,
		"seed": in.Header.Seed, "world": in.Header.World, "shards": in.Header.Shards, "config": config,
		"created": time.Unix(0, in.Header.Created).UTC().Format(time.RFC3339),
		"bytes":   in.FileBytes, "indexed": in.Indexed, "truncated": in.Truncated,
		"base_tick": in.BaseTick, "first_tick": in.FirstTick, "last_tick": in.LastTick, "ticks": in.Ticks,
		"seconds": in.Duration.Seconds(), "first_pos": in.FirstPos, "last_pos": in.LastPos,
		"full_snapshots": in.FullSnapshots, "delta_snapshots": in.DeltaSnapshots,
		"snapshot_every_ticks": in.SnapshotEvery, "full_every_ticks": in.FullEvery,
		"lineage_ranges": in.LineageRanges, "bytes_per_minute": in.BytesPerMinute, "chunks": chunks,
	}
}

// PrintInfo is 'replay info': in for people; extent describes the world
// the recording is of ("1000 × 1000 m in 4 sectors, 12 islands").
func (g Game) PrintInfo(w io.Writer, in bsr.Info, extent string) {
	h := in.Header
	fmt.Fprintf(w, "%s: %s recording (schema %d) of world %d, seed %d, %s\n",
		in.Path, h.Game, h.SchemaVersion, h.World, h.Seed, extent)
	fmt.Fprintf(w, "  recorded %s; %d Hz\n", time.Unix(0, h.Created).UTC().Format(time.RFC3339), h.TickRate)
	if in.Ticks == 0 {
		fmt.Fprintf(w, "  no tick recorded (starts from tick %d)\n", in.BaseTick)
	} else {
		from := "the start of the match"
		if in.BaseTick > 0 {
			from = fmt.Sprintf("a snapshot of tick %d", in.BaseTick)
		}
		fmt.Fprintf(w, "  ticks %d..%d: %s of play, from %s; log positions %d..%d\n", in.FirstTick, in.LastTick, report.PlayTime(in.Ticks, g.TickRate), from, in.FirstPos, in.LastPos)
	}
	fmt.Fprintf(w, "  %s, %s per minute of play\n", report.Bytes(float64(in.FileBytes)), report.Bytes(in.BytesPerMinute))
	if in.FullSnapshots+in.DeltaSnapshots > 0 {
		fmt.Fprintf(w, "  snapshots: %d full, %d delta (per sector: one every %.0f ticks, a full one every %.0f)\n",
			in.FullSnapshots, in.DeltaSnapshots, in.SnapshotEvery, in.FullEvery)
	}
	fmt.Fprintf(w, "  lineage: %d ranges\n", in.LineageRanges)
	if in.Indexed {
		fmt.Fprintf(w, "  seek index: present\n")
	} else {
		fmt.Fprintf(w, "  seek index: missing (recovered by scanning)\n")
	}
	if in.Truncated != "" {
		fmt.Fprintf(w, "  CUT: %s\n", in.Truncated)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  chunk\tcount\traw\tin file\tshare\t")
	for _, k := range in.Chunks {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.1f%%\t\n", k.Kind, k.Chunks, report.Bytes(float64(k.Raw)), report.Bytes(float64(k.Stored)), 100*float64(k.Stored)/float64(max(in.FileBytes, 1)))
	}
	tw.Flush()
	g.SchemaWarning(w, h)
}

// PrintSigned is the line of 'replay verify --key' on the signed log of
// the recording at path.
func PrintSigned(w io.Writer, path string, res bsr.SignedResult) {
	last := res.Last()
	end := "final"
	if !res.Final {
		end = "NOT final: the recording was cut"
	}
	fmt.Fprintf(w, "SIGNED: %s: %d log entries match %d checkpoints signed by %s (tree size %d..%d, root %s at tick %d, %s)\n",
		path, res.Entries, len(res.Checkpoints), res.Key, res.BaseSize, last.Size, last.Root, last.Tick, end)
}

// VerifyJSON is 'replay verify --json': res, and signed, if not nil, the
// check of the recording's signed log.
func VerifyJSON(res bsr.VerifyResult, signed *bsr.SignedResult) map[string]any {
	m := map[string]any{"ok": res.OK, "ticks": res.Ticks, "chunks": res.Chunks, "seconds": res.Took.Seconds(), "truncated": res.Truncated, "detail": res.Detail}
	if !res.OK {
		m["first_tick"], m["shard"], m["want"], m["got"] = res.FirstTick, res.Shard, fmt.Sprintf("%#x", res.Want), fmt.Sprintf("%#x", res.Got)
		m["diff_tick"], m["table"], m["slot"], m["offset"] = res.DiffTick, res.Table, res.Slot, res.Offset
		m["entity"], m["field"], m["exact"] = res.Entity, res.Field, res.Exact
	}
	if signed != nil {
		last := signed.Last()
		m["signed"] = map[string]any{"key": signed.Key, "checkpoints": len(signed.Checkpoints), "entries": signed.Entries,
			"tree_size": last.Size, "root": last.Root.String(), "final": signed.Final}
	}
	return m
}

// PrintVerify is 'replay verify': res, the re-simulation of r, for people.
func (g Game) PrintVerify(w io.Writer, r *bsr.Reader, res bsr.VerifyResult) {
	h := r.Header()
	rate := float64(res.Ticks) / max(res.Took.Seconds(), 1e-9)
	if res.OK {
		fmt.Fprintf(w, "OK: ticks %d..%d (%s of play) × %d sectors re-simulated, every state hash matches; %d chunks checked (%.1f s, %.0f ticks/s)\n",
			r.FirstTick(), r.LastTick(), report.PlayTime(res.Ticks, g.TickRate), h.Shards, res.Chunks, res.Took.Seconds(), rate)
		return
	}
	fmt.Fprintf(w, "DIVERGED at tick %d (%s into the match) in sector %d\n", res.FirstTick, report.PlayTime(res.FirstTick, g.TickRate), res.Shard)
	fmt.Fprintf(w, "  state hash: recorded %#x, re-simulated %#x\n", res.Want, res.Got)
	switch {
	case res.DiffTick == 0:
		fmt.Fprintf(w, "  no recorded snapshot after it to compare the state with\n")
	case res.Slot < 0 && res.Offset < 0 && res.Entity == "":
		fmt.Fprintf(w, "  at tick %d the re-simulated state equals the recorded snapshot: the recorded hash is wrong, or the states converged again\n", res.DiffTick)
	default:
		where := fmt.Sprintf("at the snapshot of tick %d", res.DiffTick)
		if res.Exact {
			where = fmt.Sprintf("at tick %d itself (located by %s)", res.DiffTick, res.LocatedBy)
		}
		fmt.Fprintf(w, "  first difference %s: %s", where, res.Entity)
		if res.Field != "" {
			fmt.Fprintf(w, ", field %s", res.Field)
		}
		if want, got, ok := g.fieldValues(res); ok {
			fmt.Fprintf(w, ": recorded %s, re-simulated %s", want, got)
		} else if len(res.WantBytes) > 0 {
			fmt.Fprintf(w, " (bytes from offset %d: recorded % x, re-simulated % x)", res.Offset, res.WantBytes, res.GotBytes)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  %s\n", res.Detail)
}

func (g Game) fieldValues(res bsr.VerifyResult) (string, string, bool) {
	if g.FieldValues == nil {
		return "", "", false
	}
	return g.FieldValues(res.Table, res.Offset, res.WantBytes, res.GotBytes)
}

// VerifyOptions say how Verify reports.
type VerifyOptions struct {
	// JSON prints VerifyJSON instead of text; Signed, if not nil, is the
	// check of the recording's signed log, for the JSON.
	JSON   bool
	Signed *bsr.SignedResult
	// NoProgress turns the progress display (on Verify's errOut) off.
	NoProgress bool
}

// Verify re-simulates r with newSim (bsr.Verify), showing progress on
// errOut, and writes the result to out. It returns an error wrapping
// ErrDiverged if r does not re-simulate.
func (g Game) Verify(ctx context.Context, out, errOut io.Writer, r *bsr.Reader, newSim func(shard uint32) (replay.TableSim, error), o VerifyOptions) error {
	if !o.JSON {
		g.SchemaWarning(out, r.Header())
		if r.Truncated() != "" {
			fmt.Fprintf(out, "recording cut: %s\n", r.Truncated())
		}
	}
	prog := report.NewProgress(errOut, "verify", r.LastTick()-r.BaseTick(), false, o.NoProgress || o.JSON)
	res, err := bsr.Verify(ctx, r, newSim, func(t uint64) { prog.Set(t-r.BaseTick(), t) })
	prog.Finish()
	if err != nil {
		return err
	}
	if o.JSON {
		if err := report.WriteJSON(out, VerifyJSON(res, o.Signed)); err != nil {
			return err
		}
	} else {
		g.PrintVerify(out, r, res)
	}
	if !res.OK {
		return fmt.Errorf("%w: tick %d, sector %d, %s %s", ErrDiverged, res.FirstTick, res.Shard, res.Entity, res.Field)
	}
	return nil
}

// Seek is what a seek cost ('replay seek --json' adds the game's summary
// of the state).
type Seek struct {
	Tick      uint64  `json:"tick"`
	TookMs    float64 `json:"took_ms"`
	RestoreMs float64 `json:"restore_ms"`
	ReplayMs  float64 `json:"replay_ms"`
	Replayed  uint64  `json:"replayed_ticks"`
	Restored  int     `json:"restored_sectors"`
	Snapshots int     `json:"snapshots"`
	RawBytes  int64   `json:"snapshot_raw_bytes"`
}

// SeekOf is the last seek of sk.
func SeekOf(sk *bsr.Seeker) Seek {
	st := sk.LastSeek()
	return Seek{Tick: sk.Tick(), TookMs: report.Ms(st.Took), RestoreMs: report.Ms(st.Restore), ReplayMs: report.Ms(st.Replay),
		Replayed: st.Replayed, Restored: st.Restored, Snapshots: st.Snapshots, RawBytes: st.RawBytes}
}

// PrintSeek writes s, a seek in r, for people (the game's summary of the
// state follows).
func (g Game) PrintSeek(w io.Writer, r *bsr.Reader, s Seek) {
	fmt.Fprintf(w, "tick %d (%s into the match; the recording holds %d..%d)\n", s.Tick, report.PlayTime(s.Tick, g.TickRate), r.BaseTick(), r.LastTick())
	fmt.Fprintf(w, "seek took %.2f ms: %d sectors restored from %d snapshots (%s raw) in %.2f ms, up to %d ticks replayed in %.2f ms\n",
		s.TookMs, s.Restored, s.Snapshots, report.Bytes(float64(s.RawBytes)), s.RestoreMs, s.Replayed, s.ReplayMs)
}
