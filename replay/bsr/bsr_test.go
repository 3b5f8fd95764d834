package bsr

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
)

func checkSeekHashes(t *testing.T, r *Reader, l *testLog, sk *Seeker, tick uint64) {
	t.Helper()
	if err := sk.Seek(tick); err != nil {
		t.Fatalf("seek %d: %v", tick, err)
	}
	if sk.Tick() != tick {
		t.Fatalf("seek %d: at tick %d", tick, sk.Tick())
	}
	if tick == 0 {
		return
	}
	for s, sim := range sk.Sims() {
		if got, want := sim.Hash(), l.hashes[tick][s]; got != want {
			t.Fatalf("seek %d: shard %d hash %#x, want %#x", tick, s, got, want)
		}
	}
}

func TestRecordReadBack(t *testing.T) {
	l := makeTestLog(t, 3, 400, 1)
	path, st := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 100, DeltaEvery: 20}})
	if st.FirstTick != 1 || st.LastTick != 400 || st.Ticks != 400 || st.Stopped != "end of log" {
		t.Fatalf("stats %+v", st)
	}
	r := mustOpen(t, path)
	if r.Truncated() != "" || !r.Indexed() {
		t.Fatalf("truncated %q indexed %v", r.Truncated(), r.Indexed())
	}
	h := r.Header()
	if h.Game != "counter" || h.SchemaVersion != 3 || h.Seed != 42 || h.World != 9 || h.Shards != 3 || string(h.GameConfig) != "cfg" || h.Created != 1 {
		t.Fatalf("header %+v", h)
	}
	if r.BaseTick() != 0 || r.FirstTick() != 1 || r.LastTick() != 400 {
		t.Fatalf("ticks %d %d %d", r.BaseTick(), r.FirstTick(), r.LastTick())
	}
	for tick := uint64(1); tick <= 400; tick++ {
		rec, err := r.Tick(tick)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Gap != l.gaps[tick] {
			t.Fatalf("tick %d gap %v", tick, rec.Gap)
		}
		for s := range uint32(3) {
			if rec.Hashes[s] != l.hashes[tick][s] {
				t.Fatalf("tick %d shard %d recorded %#x, want %#x", tick, s, rec.Hashes[s], l.hashes[tick][s])
			}
		}
	}
	hs, err := r.Hashes(2, 10, 60)
	if err != nil || len(hs) != 51 || hs[0] != l.hashes[10][2] || hs[50] != l.hashes[60][2] {
		t.Fatalf("Hashes: %v %d", err, len(hs))
	}
	in := r.Info()
	if in.Ticks != 400 || in.FullSnapshots != 3*4 || in.DeltaSnapshots == 0 || in.FirstPos != 1 {
		t.Fatalf("info %+v", in)
	}
	if _, err := r.Tick(401); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("tick 401: %v", err)
	}
}

func TestSeekEveryTick(t *testing.T) {
	l := makeTestLog(t, 2, 300, 2)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 64, DeltaEvery: 16}})
	r := mustOpen(t, path)
	sk, err := NewSeeker(r, l.newSim)
	if err != nil {
		t.Fatal(err)
	}
	// Forwards tick by tick (continuation), then random jumps (restores),
	// then backwards.
	for tick := uint64(1); tick <= 300; tick++ {
		if err := sk.Step(); err != nil {
			t.Fatalf("step to %d: %v", tick, err)
		}
		checkSeekHashes(t, r, l, sk, tick)
	}
	if err := sk.Step(); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("step past the end: %v", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		checkSeekHashes(t, r, l, sk, uint64(rng.IntN(301)))
	}
	for tick := uint64(300); tick <= 300; tick-- {
		sk.Reset()
		checkSeekHashes(t, r, l, sk, tick)
		if tick == 0 {
			break
		}
	}
	if st := sk.LastSeek(); st.Tick != 0 {
		t.Fatalf("last seek %+v", st)
	}
}

func TestRecordTickRange(t *testing.T) {
	l := makeTestLog(t, 2, 300, 5)
	for _, c := range []struct{ from, to, base, last uint64 }{
		{from: 100, to: 200, base: 99, last: 200},
		{from: 38, to: 0, base: 38, last: 300}, // tick 37 is a gap: the base is the next marked tick
		{from: 0, to: 37, base: 0, last: 38},   // ends at the marker that stepped 37
	} {
		path, st := recordTestLog(t, l, RecordConfig{FromTick: c.from, ToTick: c.to})
		r := mustOpen(t, path)
		if r.BaseTick() != c.base || r.LastTick() != c.last || st.BaseTick != c.base || st.LastTick != c.last {
			t.Fatalf("%+v: recording %d..%d, stats %+v", c, r.BaseTick(), r.LastTick(), st)
		}
		sk, err := NewSeeker(r, l.newSim)
		if err != nil {
			t.Fatal(err)
		}
		for tick := c.last; tick >= c.base && tick <= c.last; tick-- {
			sk.Reset()
			checkSeekHashes(t, r, l, sk, tick)
		}
		if err := sk.Seek(c.base - 1); c.base > 0 && !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("seek before the base: %v", err)
		}
		res, err := Verify(context.Background(), r, l.newSim, nil)
		if err != nil || !res.OK {
			t.Fatalf("%+v: verify %v %+v", c, err, res)
		}
	}
}

func TestVerifyOK(t *testing.T) {
	l := makeTestLog(t, 3, 500, 6)
	path, _ := recordTestLog(t, l, RecordConfig{})
	r := mustOpen(t, path)
	var last uint64
	res, err := Verify(context.Background(), r, l.newSim, func(tick uint64) { last = tick })
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Ticks != 500 || res.Chunks != len(r.refs) || last != 500 {
		t.Fatalf("%+v (progress %d)", res, last)
	}
}

// TestVerifyTamperedCommand changes one recorded command: re-simulation
// then diverges at its tick, and the state comparison at the next snapshot
// names the counter it changed.
func TestVerifyTamperedCommand(t *testing.T) {
	l := makeTestLog(t, 2, 300, 7)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 50, DeltaEvery: 10}})
	// Find an "add" command for shard 0 after tick 100 and change its value.
	var target uint64
	edited := rewrite(t, path, func(c chunkRef, raw []byte) []byte {
		if c.Kind != KindCommands || target != 0 || c.First < 100 {
			return raw
		}
		entries, err := decodeEntries(raw, &c)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range entries {
			if i+1 < len(entries) && len(e.Record.Data) > 0 {
				if pl := payloadOf(t, e.Record.Data); len(pl) == 3 && pl[0] == 2 && pl[1]%2 == 0 && pl[2] != 0 {
					data := cmdRec(1, 1, []byte{2, pl[1], pl[2] + 1})
					entries[i].Record.Data = data
					target = e.Pos
					break
				}
			}
		}
		return appendEntries(nil, c.Aux1, entries)
	})
	if target == 0 {
		t.Fatal("no command to tamper with")
	}
	r := mustOpen(t, edited)
	res, err := Verify(context.Background(), r, l.newSim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Shard != 0 || res.FirstTick < 100 || res.DiffTick < res.FirstTick || res.DiffTick-res.FirstTick > 10 {
		t.Fatalf("%+v", res)
	}
	if !strings.HasPrefix(res.Entity, "counter ") || res.Field != "value" || res.Table != 7 || res.Offset < 8 {
		t.Fatalf("entity %q field %q table %d offset %d: %s", res.Entity, res.Field, res.Table, res.Offset, res.Detail)
	}
	t.Log(res.Detail)
	// A seek past the tampered tick notices the divergence too.
	sk, err := NewSeeker(r, l.newSim)
	if err != nil {
		t.Fatal(err)
	}
	if err := sk.Seek(res.FirstTick); !errors.Is(err, ErrDiverged) {
		t.Fatalf("seek to the diverging tick: %v", err)
	}
}

// TestVerifyTamperedHash changes one recorded hash: the state at the next
// snapshot still matches, so verify says the recorded hash is wrong.
func TestVerifyTamperedHash(t *testing.T) {
	l := makeTestLog(t, 2, 200, 8)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 50, DeltaEvery: 10}})
	edited := rewrite(t, path, func(c chunkRef, raw []byte) []byte {
		if c.Kind == KindTicks && c.First <= 123 && c.Last >= 123 {
			tc, err := decodeTicks(raw, &c, 2)
			if err != nil {
				t.Fatal(err)
			}
			tc.hashes[int(123-c.First)*2+1] ^= 1
			var recs []TickRecord
			for tick := tc.first; tick <= tc.last(); tick++ {
				recs = append(recs, tc.record(tick))
			}
			return appendTicks(nil, c.Aux1, recs)
		}
		return raw
	})
	res, err := Verify(context.Background(), mustOpen(t, edited), l.newSim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.FirstTick != 123 || res.Shard != 1 || res.Want^res.Got != 1 || !strings.Contains(res.Detail, "recorded hash is wrong") {
		t.Fatalf("%+v", res)
	}
}

func TestVerifyCorruptChunk(t *testing.T) {
	l := makeTestLog(t, 2, 200, 9)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 50, DeltaEvery: 10}})
	r := mustOpen(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []ChunkKind{KindSnapshot, KindCommands, KindTicks, KindLineage} {
		var c chunkRef
		for _, ref := range r.refs {
			if ref.Kind == kind && ref.First > 60 {
				c = ref
				break
			}
		}
		bad := bytes.Clone(b)
		bad[c.Off+chunkHeaderLen+int64(c.Stored)/2] ^= 0x40
		rb := mustOpen(t, writeFile(t, bad))
		if _, err := Verify(context.Background(), rb, l.newSim, nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
			t.Fatalf("%s chunk flipped: verify %v", kind, err)
		}
	}
}

// TestTruncatedRecovery cuts a recording at many lengths: every cut opens
// (or fails cleanly if the header is cut), says what was cut, and seeks and
// verifies up to its last complete tick.
func TestTruncatedRecovery(t *testing.T) {
	l := makeTestLog(t, 2, 240, 10)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 60, DeltaEvery: 15}})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	full := mustOpen(t, path)
	prevLast := uint64(0)
	for n := 0; n <= len(b); n += 1 + n/9 {
		r, err := Open(writeFile(t, b[:n]))
		if err != nil {
			if n >= int(full.dataStart) {
				t.Fatalf("cut at %d of %d: %v", n, len(b), err)
			}
			if !errors.Is(err, ErrNotRecording) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut header at %d: %v", n, err)
			}
			continue
		}
		if n < len(b) && r.Truncated() == "" {
			t.Fatalf("cut at %d of %d: nothing reported cut", n, len(b))
		}
		if r.LastTick() < prevLast {
			t.Fatalf("cut at %d: last tick %d below a shorter cut's %d", n, r.LastTick(), prevLast)
		}
		prevLast = r.LastTick()
		sk, err := NewSeeker(r, l.newSim)
		if err != nil {
			t.Fatalf("cut at %d: %v", n, err)
		}
		checkSeekHashes(t, r, l, sk, r.LastTick())
		if r.LastTick() > 0 {
			checkSeekHashes(t, r, l, sk, r.LastTick()/2)
		}
		res, err := Verify(context.Background(), r, l.newSim, nil)
		switch {
		case res.Ticks == 0:
			// Nothing re-simulated: verify must say so, not pass.
			if !errors.Is(err, ErrNothingToVerify) || res.OK {
				t.Fatalf("cut at %d (last tick %d): nothing to verify, yet verify %v %+v", n, r.LastTick(), err, res)
			}
		case err != nil || !res.OK:
			t.Fatalf("cut at %d (last tick %d): verify %v %+v", n, r.LastTick(), err, res)
		}
		r.Close()
	}
	if prevLast != 240 {
		t.Fatalf("the whole file recovered to tick %d", prevLast)
	}
}

// TestAbandonedWriter is a crash: the writer never closes.
func TestAbandonedWriter(t *testing.T) {
	l := makeTestLog(t, 2, 150, 11)
	path := t.TempDir() + "/crash.bsr"
	w, err := Create(path, testHeader(2), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Record(context.Background(), RecordConfig{Source: l.source(), Writer: w, NewSim: l.newSim}); err != nil {
		t.Fatal(err)
	}
	w.abandon()
	r := mustOpen(t, path)
	if r.Indexed() || !strings.Contains(r.Truncated(), "not closed cleanly") || r.LastTick() != 150 {
		t.Fatalf("indexed %v, truncated %q, last %d", r.Indexed(), r.Truncated(), r.LastTick())
	}
	res, err := Verify(context.Background(), r, l.newSim, nil)
	if err != nil || !res.OK {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestForeignFiles(t *testing.T) {
	cases := map[string][]byte{
		"empty":       nil,
		"short":       []byte("BSR"),
		"elf":         []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		"text":        []byte("hello, this is not a recording at all\n"),
		"magic only":  []byte("BSREPLAY"),
		"bad version": append([]byte("BSREPLAY\x09\x00\x00\x00"), make([]byte, 40)...),
	}
	for name, b := range cases {
		_, err := Open(writeFile(t, b))
		switch {
		case err == nil:
			t.Errorf("%s: opened", name)
		case name == "bad version" && !errors.Is(err, ErrVersion):
			t.Errorf("%s: %v", name, err)
		case name != "bad version" && name != "magic only" && !errors.Is(err, ErrNotRecording):
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Open(t.TempDir() + "/missing.bsr"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestFixedPolicyDeterministic: recording one log twice with a fixed
// schedule gives identical files.
func TestFixedPolicyDeterministic(t *testing.T) {
	l := makeTestLog(t, 2, 200, 12)
	cfg := RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 40, DeltaEvery: 8}}
	a, _ := recordTestLog(t, l, cfg)
	b, _ := recordTestLog(t, l, cfg)
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two recordings of one log differ")
	}
}

func TestLineageFromRecording(t *testing.T) {
	l := makeTestLog(t, 2, 300, 13)
	path, _ := recordTestLog(t, l, RecordConfig{})
	r := mustOpen(t, path)
	ix, err := r.Lineage()
	if err != nil {
		t.Fatal(err)
	}
	st := ix.Stats()
	if st.Shards != 2 || st.FirstTick != 1 || st.LastTick != 300 || st.Inputs == 0 || st.Events == 0 {
		t.Fatalf("%+v", st)
	}
	if ix.KindName(1) != "counter" {
		t.Fatalf("kind name %q", ix.KindName(1))
	}
	// Frame of a tick lists its inputs.
	fr, err := ix.Frame(120)
	if err != nil {
		t.Fatal(err)
	}
	_ = fr
	var e lineage.EntityID
	sk, _ := NewSeeker(r, l.newSim)
	if err := sk.Seek(250); err != nil {
		t.Fatal(err)
	}
	cs := sk.Sims()[0].(*counterSim)
	if i := cs.t.NextLive(0); i >= 0 {
		e = lineage.EntityID(cs.t.Row(i).U64(0))
	}
	if e == 0 {
		t.Fatal("no counter")
	}
	why, err := ix.Why(lineage.AnyShard, e, 250, 2)
	if err != nil {
		t.Fatal(err)
	}
	if why.Applications == 0 {
		t.Fatalf("why %v: no commands", e)
	}
}

func TestReSourceRerecord(t *testing.T) {
	l := makeTestLog(t, 2, 200, 14)
	path, _ := recordTestLog(t, l, RecordConfig{})
	r := mustOpen(t, path)
	src, err := r.Source()
	if err != nil {
		t.Fatal(err)
	}
	l2 := *l
	dst := t.TempDir() + "/again.bsr"
	w, _ := Create(dst, testHeader(2), WriterOptions{})
	if _, err := Record(context.Background(), RecordConfig{Source: src, Writer: w, NewSim: l2.newSim, Snapshots: SnapshotPolicy{FullEvery: 900}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r2 := mustOpen(t, dst)
	if r2.LastTick() != 200 || r2.Info().DeltaSnapshots != 0 {
		t.Fatalf("%+v", r2.Info())
	}
	if res, err := Verify(context.Background(), r2, l.newSim, nil); err != nil || !res.OK {
		t.Fatal(err, res)
	}
	if st, err := r2.ScanTo(150); err != nil || st.Chunks == 0 {
		t.Fatal(st, err)
	}
}

// TestRecordFromSims starts a recording from sims already at a tick, as a
// server whose log was trimmed would (here: sims brought there by a seek).
func TestRecordFromSims(t *testing.T) {
	l := makeTestLog(t, 2, 300, 15)
	path, _ := recordTestLog(t, l, RecordConfig{})
	r := mustOpen(t, path)
	sk, err := NewSeeker(r, l.newSim)
	if err != nil {
		t.Fatal(err)
	}
	if err := sk.Seek(120); err != nil {
		t.Fatal(err)
	}
	rec, err := r.Tick(120)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir() + "/late.bsr"
	w, _ := Create(dst, testHeader(2), WriterOptions{})
	st, err := Record(context.Background(), RecordConfig{Source: replay.NewSliceSource(l.entries, rec.Pos+1), Writer: w,
		Sims: sk.Sims(), Start: replay.Checkpoint{Tick: 120, Pos: rec.Pos}, FromTick: 150})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	r2 := mustOpen(t, dst)
	if r2.BaseTick() != 149 || r2.LastTick() != 300 || st.FastForward != 29 {
		t.Fatalf("base %d last %d %+v", r2.BaseTick(), r2.LastTick(), st)
	}
	if res, err := Verify(context.Background(), r2, l.newSim, nil); err != nil || !res.OK {
		t.Fatal(err, res)
	}
	if h, _ := r2.Hash(1, 149); h != l.hashes[149][1] {
		t.Fatalf("base hash %#x", h)
	}
}
