package shardstore

import (
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore/storagetest"
)

// genPos draws positions mostly from a small range (so writes collide) and
// sometimes from the edges of the key space.
var genPos = rapid.OneOf(
	rapid.Uint64Range(0, 40),
	rapid.SampledFrom([]uint64{0, 1, math.MaxUint64 - 1, math.MaxUint64}),
)

var genEntry = rapid.Custom(func(t *rapid.T) msg.Entry {
	return msg.Entry{
		Pos: genPos.Draw(t, "pos"),
		Record: msg.Record{
			ID: msg.RecordID{
				Client: rapid.Uint64().Draw(t, "client"),
				Seq:    rapid.Uint64().Draw(t, "seq"),
			},
			Data: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data"),
		},
	}
})

var genWrites = rapid.Custom(func(t *rapid.T) shard.Writes {
	w := shard.Writes{Puts: rapid.SliceOfN(genEntry, 0, 12).Draw(t, "puts")}
	if rapid.IntRange(0, 5).Draw(t, "hasDeleteAbove") == 0 {
		w.HasDeleteAbove, w.DeleteAbove = true, genPos.Draw(t, "deleteAbove")
	}
	if rapid.IntRange(0, 5).Draw(t, "hasTrim") == 0 {
		w.TrimTo = genPos.Draw(t, "trimTo")
	}
	if rapid.Bool().Draw(t, "hasMeta") {
		w.Meta = &shard.Meta{
			Epoch:    rapid.Uint64().Draw(t, "epoch"),
			StableGP: rapid.Uint64().Draw(t, "stableGP"),
			Trimmed:  rapid.Uint64().Draw(t, "trimmed"),
		}
	}
	return w
})

// TestPebbleMatchesMemory applies random sequences of Writes, reopens and
// reads to Pebble and to Memory (the model) and requires identical answers.
func TestPebbleMatchesMemory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fs := vfs.NewMem()
		p, err := Open("shard", Options{FS: fs})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer func() { _ = p.Close() }()
		model := NewMemory()
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0: // reopen
				if err := p.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if p, err = Open("shard", Options{FS: fs}); err != nil {
					t.Fatalf("reopen: %v", err)
				}
			case 1, 2: // get
				pos := genPos.Draw(t, "getPos")
				pe, pok, perr := p.Get(pos)
				me, mok, _ := model.Get(pos)
				if perr != nil || pok != mok || (pok && !storagetest.EqualEntry(pe, me)) {
					t.Fatalf("Get(%d): pebble %v %v %v, memory %v %v", pos, pe, pok, perr, me, mok)
				}
			case 3, 4: // scan
				from, to := genPos.Draw(t, "from"), genPos.Draw(t, "to")
				limit := rapid.IntRange(1, 50).Draw(t, "limit")
				pes, perr := scanN(p, from, to, limit)
				mes, _ := scanN(model, from, to, limit)
				if perr != nil {
					t.Fatalf("Scan: %v", perr)
				}
				if d := storagetest.DiffEntries(pes, mes); d != "" {
					t.Fatalf("Scan(%d, %d) limit %d: pebble vs memory: %s", from, to, limit, d)
				}
			case 5: // several Writes as one batch
				ws := rapid.SliceOfN(genWrites, 1, 5).Draw(t, "batch")
				if err := p.ApplyAll(ws); err != nil {
					t.Fatalf("ApplyAll: %v", err)
				}
				for _, w := range ws {
					_ = model.Apply(w)
				}
			default:
				w := genWrites.Draw(t, "writes")
				if err := p.Apply(w); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				_ = model.Apply(w)
			}
		}
		got, err := storagetest.ReadState(p)
		if err != nil {
			t.Fatalf("read pebble: %v", err)
		}
		want, _ := storagetest.ReadState(model)
		if d := storagetest.DiffEntries(got.Entries, want.Entries); d != "" || got.Meta != want.Meta {
			t.Fatalf("final state: entries %s; meta %+v, want %+v", d, got.Meta, want.Meta)
		}
	})
}

// scanN scans at most limit entries.
func scanN(s shard.Storage, from, to uint64, limit int) ([]msg.Entry, error) {
	var out []msg.Entry
	err := s.Scan(from, to, func(e msg.Entry) bool {
		out = append(out, e)
		return len(out) < limit
	})
	return out, err
}
