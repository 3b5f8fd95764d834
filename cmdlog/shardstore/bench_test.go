package shardstore

import (
	"fmt"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// benchEntries returns n entries of 100 bytes of data from position first.
func benchEntries(first uint64, n int) []msg.Entry {
	es := make([]msg.Entry, n)
	for i := range es {
		data := make([]byte, 100)
		for j := range data {
			data[j] = byte(i + j)
		}
		es[i] = msg.Entry{Pos: first + uint64(i), Record: msg.Record{ID: msg.RecordID{Client: 42, Seq: first + uint64(i)}, Data: data}}
	}
	return es
}

// BenchmarkPebbleApply measures appends of batches of 100-byte entries on
// the OS file system (a temp dir), synced and not. b.SetBytes counts record
// data only.
func BenchmarkPebbleApply(b *testing.B) {
	for _, d := range []Durability{SyncWrites, NoSyncWrites} {
		for _, n := range []int{1, 64, 512} {
			b.Run(fmt.Sprintf("%s/batch=%d", d, n), func(b *testing.B) {
				p := openPebble(b, b.TempDir(), Options{Durability: d})
				batch := benchEntries(1, n)
				b.SetBytes(int64(100 * n))
				b.ReportAllocs()
				pos := uint64(1)
				for b.Loop() {
					for i := range batch {
						batch[i].Pos = pos
						pos++
					}
					if err := p.Apply(shard.Writes{Puts: batch}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}

// BenchmarkMemoryApply is the simulator's store, for scale.
func BenchmarkMemoryApply(b *testing.B) {
	m := NewMemory()
	batch := benchEntries(1, 64)
	b.SetBytes(100 * 64)
	b.ReportAllocs()
	pos := uint64(1)
	for b.Loop() {
		for i := range batch {
			batch[i].Pos = pos
			pos++
		}
		_ = m.Apply(shard.Writes{Puts: batch})
		if m.Len() > 1<<16 {
			_ = m.Apply(shard.Writes{TrimTo: pos})
		}
	}
}

// BenchmarkScan reads 1000 consecutive entries out of 100 000, from the
// memtable and (after a flush and compaction) from sstables.
func BenchmarkScan(b *testing.B) {
	setup := func(b *testing.B, s shard.Storage) {
		for first := uint64(1); first <= 100_000; first += 1000 {
			if err := s.Apply(shard.Writes{Puts: benchEntries(first, 1000)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(b *testing.B, s shard.Storage) {
		b.SetBytes(1000 * 100)
		b.ReportAllocs()
		from := uint64(1)
		for b.Loop() {
			n := 0
			if err := s.Scan(from, from+999, func(msg.Entry) bool { n++; return true }); err != nil {
				b.Fatal(err)
			}
			if n != 1000 {
				b.Fatalf("scanned %d entries", n)
			}
			from = (from + 7919) % 99_000
			if from == 0 {
				from = 1
			}
		}
	}
	b.Run("pebble/memtable", func(b *testing.B) {
		p := openPebble(b, b.TempDir(), Options{Durability: NoSyncWrites, MemTableSize: 64 << 20})
		setup(b, p)
		run(b, p)
	})
	b.Run("pebble/sstables", func(b *testing.B) {
		p := openPebble(b, b.TempDir(), Options{Durability: NoSyncWrites})
		setup(b, p)
		if err := p.db.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := p.db.Compact(b.Context(), []byte{prefixEntry}, keyEntriesEnd, false); err != nil {
			b.Fatal(err)
		}
		run(b, p)
	})
	b.Run("memory", func(b *testing.B) {
		m := NewMemory()
		setup(b, m)
		run(b, m)
	})
}
