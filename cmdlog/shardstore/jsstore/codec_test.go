package jsstore

import (
	"errors"
	"testing"

	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore/storagetest"
)

func TestCodecRoundTrip(t *testing.T) {
	ws := []shard.Writes{
		{Puts: storagetest.Range(1, 3, "a"), Meta: &shard.Meta{Epoch: 1, StableGP: 2, Trimmed: 0}},
		{HasDeleteAbove: true, DeleteAbove: 0, TrimTo: 7},
		{Puts: storagetest.Range(1<<63, 1<<63+1, "b")},
	}
	got, err := decodeBody(appendBody(nil, ws))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ws) {
		t.Fatalf("%d writes, want %d", len(got), len(ws))
	}
	for i := range ws {
		if d := storagetest.DiffEntries(got[i].Puts, ws[i].Puts); d != "" {
			t.Errorf("writes %d: %s", i, d)
		}
		if got[i].HasDeleteAbove != ws[i].HasDeleteAbove || got[i].DeleteAbove != ws[i].DeleteAbove || got[i].TrimTo != ws[i].TrimTo ||
			(got[i].Meta == nil) != (ws[i].Meta == nil) || (ws[i].Meta != nil && *got[i].Meta != *ws[i].Meta) {
			t.Errorf("writes %d: got %+v, want %+v", i, got[i], ws[i])
		}
	}
	m := encodeChunk(42, true, []byte("chunk"))
	g, last, c, err := decodeChunk(m)
	if err != nil || g != 42 || !last || string(c) != "chunk" {
		t.Fatalf("decodeChunk = %d, %v, %q, %v", g, last, c, err)
	}
	m[len(m)-1] ^= 1
	if _, _, _, err := decodeChunk(m); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped bit: %v, want ErrCorrupt", err)
	}
}

// FuzzDecode feeds stream messages from outside (anyone with publish rights
// on the subject) to the decoders: they must fail cleanly, never panic, and
// what decodes must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encodeChunk(1, true, appendBody(nil, []shard.Writes{{Puts: storagetest.Range(1, 2, "a"), TrimTo: 1, Meta: &shard.Meta{Epoch: 1}}})))
	f.Add(encodeChunk(9, false, []byte{1, 0}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, m []byte) {
		_, _, chunk, err := decodeChunk(m)
		if err != nil {
			chunk = m
		}
		ws, err := decodeBody(chunk)
		if err != nil {
			return
		}
		if again := appendBody(nil, ws); string(again) != string(chunk) {
			// Varints have one canonical encoding only when minimal; a
			// non-minimal input may decode. Require a stable re-encoding.
			ws2, err := decodeBody(again)
			if err != nil || string(appendBody(nil, ws2)) != string(again) {
				t.Fatalf("re-encoding is not stable: %v", err)
			}
		}
	})
}
