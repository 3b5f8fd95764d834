package bsr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/replay"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A fixed key pair for tests (made by GenerateKey).
const (
	testSignerKey   = "PRIVATE+KEY+test-server+ab9392ee+AWxg3vJPk4XesLWp1wssWdqDkg6r95tLs2OXZeQWO7y2"
	testVerifierKey = "test-server+ab9392ee+AUhe3z6J8/HTe+gsgjEWs1rQr+BXt37/bl3P+ABh3bJU"
)

func testSigner(t testing.TB) note.Signer {
	t.Helper()
	s, err := NewSigner(testSignerKey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testVerifier(t testing.TB) note.Verifier {
	t.Helper()
	v, err := NewVerifier(testVerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// recordSigned records l signed with the test key.
func recordSigned(t testing.TB, l *testLog, cfg RecordConfig) string {
	t.Helper()
	cfg.Signer = testSigner(t)
	path, _ := recordTestLog(t, l, cfg)
	return path
}

func TestGenerateKeyRoundTrip(t *testing.T) {
	sk, vk, err := GenerateKey("broadside-test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(sk)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(vk + "\n")
	if err != nil {
		t.Fatal(err)
	}
	b, err := signCheckpoint(Checkpoint{World: 3, Tick: 9, Pos: 20, Size: 20}, s)
	if err != nil {
		t.Fatal(err)
	}
	c := chunkRef{Kind: KindCheckpoint, First: 9, Last: 9, Aux1: 20, Aux2: 20}
	cp, err := openCheckpoint(b, &c, v)
	if err != nil || cp.World != 3 || cp.Size != 20 {
		t.Fatalf("%+v %v", cp, err)
	}
	if _, err := openCheckpoint(b, &c, testVerifier(t)); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key's verifier: %v", err)
	}
}

func TestSignedVerifyOK(t *testing.T) {
	l := makeTestLog(t, 2, 400, 11)
	path := recordSigned(t, l, RecordConfig{})
	r := mustOpen(t, path)
	res, err := VerifySigned(r, testVerifier(t))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Final || res.BaseSize != 0 || res.Entries != int64(len(l.entries)) || res.Last().Tick != 400 {
		t.Fatalf("%+v", res)
	}
	// At least every five seconds of match time (30 Hz).
	prev := uint64(0)
	for _, cp := range res.Checkpoints {
		if cp.Tick-prev > 5*30 {
			t.Fatalf("checkpoints at ticks %d and %d", prev, cp.Tick)
		}
		prev = cp.Tick
	}
	if _, err := VerifySigned(r, nil); err == nil {
		t.Fatal("no key accepted")
	}
	// The state hashes still verify; an unsigned recording fails the
	// signed check.
	if vr, err := Verify(context.Background(), r, l.newSim, nil); err != nil || !vr.OK {
		t.Fatalf("%+v %v", vr, err)
	}
	unsigned, _ := recordTestLog(t, l, RecordConfig{})
	if _, err := VerifySigned(mustOpen(t, unsigned), testVerifier(t)); !errors.Is(err, ErrSignature) {
		t.Fatalf("unsigned: %v", err)
	}
	sk, vk, _ := GenerateKey("impostor")
	s, _ := NewSigner(sk)
	forged, _ := recordTestLog(t, l, RecordConfig{Signer: s})
	if _, err := VerifySigned(mustOpen(t, forged), testVerifier(t)); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key: %v", err)
	}
	v, _ := NewVerifier(vk)
	if _, err := VerifySigned(mustOpen(t, forged), v); err != nil {
		t.Fatalf("its own key: %v", err)
	}
}

// tamperDetected says whether any check of the recording at path fails:
// opening it, the reader's damage note, every chunk's decode, the signed
// log check or the re-simulation.
func tamperDetected(t testing.TB, path string, newSim func(uint32) (replay.TableSim, error)) (bool, string) {
	r, err := Open(path)
	if err != nil {
		return true, "open: " + err.Error()
	}
	defer r.Close()
	if r.Truncated() != "" {
		return true, "damaged: " + r.Truncated()
	}
	if _, err := checkChunks(context.Background(), r); err != nil {
		return true, "chunks: " + err.Error()
	}
	if _, err := VerifySigned(r, testVerifier(t)); err != nil {
		return true, "signed: " + err.Error()
	}
	res, err := Verify(context.Background(), r, newSim, nil)
	if err != nil {
		return true, "verify: " + err.Error()
	}
	if !res.OK {
		return true, "verify: " + res.Detail
	}
	return false, ""
}

// tamperStats counts what the tamper tests observed (cases tried, cases
// detected), for the forensics summary line a later Makefile target prints.
var tamperStats struct{ cases, detected int }

func countTamper(detected bool) {
	tamperStats.cases++
	if detected {
		tamperStats.detected++
	}
}

// TestSignedEveryByteFlip changes every byte of a small signed recording,
// one at a time: every change is detected.
func TestSignedEveryByteFlip(t *testing.T) {
	l := makeTestLog(t, 2, 30, 12)
	path := recordSigned(t, l, RecordConfig{Snapshots: SnapshotPolicy{FullEvery: 20, DeltaEvery: 5}})
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := tamperDetected(t, path, l.newSim); ok {
		t.Fatalf("the untouched recording fails: %s", why)
	}
	dir := t.TempDir()
	missed := 0
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x5a
		p := filepath.Join(dir, "flip.bsr")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ok, _ := tamperDetected(t, p, l.newSim)
		countTamper(ok)
		if !ok {
			missed++
			t.Errorf("byte %d of %d changed: not detected", i, len(good))
		}
	}
	t.Logf("%d single-byte changes, %d missed", len(good), missed)
}

// forge rewrites the recording at src with valid checksums, passing every
// commands chunk's entries through edit: what a forger with the file
// format (but not the key) can do.
func forge(t testing.TB, src string, edit func(c chunkRef, entries []msg.Entry) []msg.Entry) string {
	t.Helper()
	return rewrite(t, src, func(c chunkRef, raw []byte) []byte {
		if c.Kind != KindCommands {
			return raw
		}
		entries, err := decodeEntries(raw, &c)
		if err != nil {
			t.Fatal(err)
		}
		cp := make([]msg.Entry, len(entries))
		copy(cp, entries)
		return appendEntries(nil, c.Aux1, edit(c, cp))
	})
}

// TestSignedForgeries drops, reorders, changes and adds every command of
// a small signed recording in turn, rewriting the file with valid
// checksums: the signed log check detects each.
func TestSignedForgeries(t *testing.T) {
	l := makeTestLog(t, 2, 40, 13)
	path := recordSigned(t, l, RecordConfig{})
	v := testVerifier(t)
	n := len(l.entries)
	kinds := map[string]func(i int, c chunkRef, es []msg.Entry) []msg.Entry{
		"drop": func(i int, c chunkRef, es []msg.Entry) []msg.Entry {
			if i == len(es)-1 {
				// The chunk must end at its marker's position: drop the
				// record, keep an empty one in its place.
				es[i].Record = msg.Record{}
				return es
			}
			return append(es[:i], es[i+1:]...)
		},
		"reorder": func(i int, c chunkRef, es []msg.Entry) []msg.Entry {
			j := i + 1
			if j == len(es) {
				j = i - 1
			}
			es[i].Record, es[j].Record = es[j].Record, es[i].Record
			return es
		},
		"change": func(i int, c chunkRef, es []msg.Entry) []msg.Entry {
			d := append([]byte(nil), es[i].Record.Data...)
			d[len(d)-1] ^= 1
			es[i].Record.Data = d
			return es
		},
		"add": func(i int, c chunkRef, es []msg.Entry) []msg.Entry {
			// A copy of the entry at a free position just before it (or
			// the entry's own record again, if none is free).
			dup := es[i]
			prev := c.Aux1
			if i > 0 {
				prev = es[i-1].Pos
			}
			if dup.Pos-prev < 2 {
				es[i].Record.ID.Seq++
				return es
			}
			dup.Pos--
			return append(es[:i], append([]msg.Entry{dup}, es[i:]...)...)
		},
	}
	for _, kind := range []string{"drop", "reorder", "change", "add"} {
		missed := 0
		for target := range n {
			seen := 0
			edited := forge(t, path, func(c chunkRef, es []msg.Entry) []msg.Entry {
				if target < seen || target >= seen+len(es) {
					seen += len(es)
					return es
				}
				i := target - seen
				seen += len(es)
				if kind == "reorder" && len(es) < 2 {
					return es
				}
				return kinds[kind](i, c, es)
			})
			_, err := VerifySigned(mustOpen(t, edited), v)
			countTamper(err != nil)
			if err == nil {
				missed++
				t.Errorf("%s entry %d: not detected", kind, target)
			}
		}
		t.Logf("%s: %d entries, %d missed", kind, n, missed)
	}
}

// TestSignedSegmentsConsistent records a match in two segments, as a
// server restart does (the second fast-forwards through the log to where
// the first ended): both verify, and the second proves its tree extends
// the first's last signed checkpoint. A second segment over a log that
// differs before the restart does not.
func TestSignedSegmentsConsistent(t *testing.T) {
	l := makeTestLog(t, 2, 300, 14)
	v := testVerifier(t)
	seg1 := recordSigned(t, &testLog{shards: l.shards, entries: cut(l.entries, 150), last: 150}, RecordConfig{})
	r1 := mustOpen(t, seg1)
	res1, err := VerifySigned(r1, v)
	if err != nil {
		t.Fatal(err)
	}
	seg2 := recordSigned(t, l, RecordConfig{FromTick: r1.LastTick() + 1, LinkSizes: []int64{res1.Last().Size}})
	res2, err := VerifySigned(mustOpen(t, seg2), v)
	if err != nil {
		t.Fatal(err)
	}
	if res2.BaseSize < res1.Last().Size || len(res2.Links) != 1 {
		t.Fatalf("segment 2 starts at tree size %d with %d links; segment 1 ends at %d", res2.BaseSize, len(res2.Links), res1.Last().Size)
	}
	if err := CheckSegments(res1, res2); err != nil {
		t.Fatal(err)
	}
	// A log rewritten before the restart: segment 2 is self-consistent
	// but not a continuation of segment 1.
	other := &testLog{shards: l.shards, entries: append([]msg.Entry(nil), l.entries...), last: l.last}
	for i, e := range other.entries {
		if pl := payloadOf(t, e.Record.Data); len(pl) == 3 && e.Pos > 20 {
			other.entries[i].Record.Data = cmdRec(1, e.Record.ID.Seq, []byte{pl[0], pl[1], pl[2] ^ 1})
			break
		}
	}
	seg2b := recordSigned(t, other, RecordConfig{FromTick: r1.LastTick() + 1, LinkSizes: []int64{res1.Last().Size}})
	res2b, err := VerifySigned(mustOpen(t, seg2b), v)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSegments(res1, res2b); !errors.Is(err, ErrSignature) {
		t.Fatalf("a rewritten history passes as a continuation: %v", err)
	}
}

// cut returns the entries through the marker of tick last.
func cut(entries []msg.Entry, last uint64) []msg.Entry {
	for i, e := range entries {
		if tick, ok := markerTick(e.Record.Data); ok && tick == last {
			return entries[:i+1]
		}
	}
	return entries
}

// TestSignedCutRecording: a recording whose writer crashed has no final
// checkpoint; it still verifies up to its last checkpoint only if nothing
// unsigned follows, and says it is not final.
func TestSignedCutRecording(t *testing.T) {
	l := makeTestLog(t, 1, 200, 15)
	path := recordSigned(t, l, RecordConfig{})
	r := mustOpen(t, path)
	// Drop the final checkpoint and everything after the second-to-last
	// commands chunk: the recording then ends at a non-final checkpoint.
	var keep int64
	for _, c := range r.refs {
		if c.Kind == KindCheckpoint && c.First < r.LastTick() {
			keep = c.Off + c.size()
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cutPath := writeFile(t, b[:keep])
	rc := mustOpen(t, cutPath)
	res, err := VerifySigned(rc, testVerifier(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Final || !strings.Contains(rc.Truncated(), "not closed") {
		t.Fatalf("%+v, truncated %q", res, rc.Truncated())
	}
}

// TestLogTreePrune: a pruned tree keeps the roots of a full one while
// holding only the hashes since its last prune and its frontier.
func TestLogTreePrune(t *testing.T) {
	full, _ := newLogTree(0, nil)
	pruned, _ := newLogTree(0, nil)
	for i := range 5000 {
		leaf := tlog.RecordHash([]byte{byte(i), byte(i >> 8)})
		if err := full.add(leaf); err != nil {
			t.Fatal(err)
		}
		if err := pruned.add(leaf); err != nil {
			t.Fatal(err)
		}
		if i%97 == 0 {
			want, _ := full.root(full.n)
			got, err := pruned.root(pruned.n)
			if err != nil || got != want {
				t.Fatalf("leaf %d: root %s, want %s (%v)", i, got, want, err)
			}
			if err := pruned.prune(); err != nil {
				t.Fatal(err)
			}
			if len(pruned.dense) != 0 || len(pruned.prefix) > 64 {
				t.Fatalf("after prune: %d dense, %d prefix hashes", len(pruned.dense), len(pruned.prefix))
			}
		}
	}
	if len(pruned.dense) > 2*97+64 {
		t.Fatalf("pruned tree holds %d hashes", len(pruned.dense))
	}
}
