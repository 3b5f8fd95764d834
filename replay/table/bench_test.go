package table

import "testing"

// entityTable returns a table of n 64-byte records (4 KiB pages).
func entityTable(b *testing.B, n int) *Table {
	tb := mustNew(b, 1, 64, Options{})
	for i := 0; i < n; i++ {
		tb.Alloc()
		tb.Mut(i).SetU64(0, uint64(i))
	}
	tb.CaptureFull()
	return tb
}

// dirtyTenPercent writes one record in every tenth page.
func dirtyTenPercent(tb *Table, round uint64) {
	for pg := 0; pg < tb.Pages(); pg += 10 {
		tb.Mut(pg*tb.RecordsPerPage()).SetU64(8, round)
	}
	tb.Hash()
}

// BenchmarkCapture measures the tick-loop pause of a delta capture of a
// table of 10,000 entities of which ~10% of pages are dirty.
func BenchmarkCapture(b *testing.B) {
	b.Run("10k-entities-10pct-dirty/alloc", func(b *testing.B) {
		tb := entityTable(b, 10000)
		b.ReportAllocs()
		var bytes int
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			dirtyTenPercent(tb, uint64(i))
			b.StartTimer()
			c := tb.Capture()
			bytes = len(c.Pages) * tb.PageBytes()
		}
		b.ReportMetric(float64(bytes), "bytes/capture")
	})
	b.Run("10k-entities-10pct-dirty/reuse", func(b *testing.B) {
		tb := entityTable(b, 10000)
		var c Capture
		tb.CaptureInto(&c, true)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			dirtyTenPercent(tb, uint64(i))
			b.StartTimer()
			tb.CaptureInto(&c, false)
		}
	})
	b.Run("10k-entities-full", func(b *testing.B) {
		tb := entityTable(b, 10000)
		var c Capture
		b.ReportAllocs()
		for b.Loop() {
			tb.CaptureInto(&c, true)
		}
		b.ReportMetric(float64(len(c.Pages)*tb.PageBytes()), "bytes/capture")
	})
}

// BenchmarkWrite measures the cost per record write of keeping the hash:
// Mut, a field store, and the re-hash at the end of the tick (one Hash call
// per 1,000 writes, as a tick would).
func BenchmarkWrite(b *testing.B) {
	b.Run("distinct-records", func(b *testing.B) {
		tb := entityTable(b, 10000)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tb.Mut((i*7919)%10000).SetU64(16, uint64(i))
			if i%1000 == 999 {
				tb.Hash()
			}
		}
	})
	b.Run("same-record", func(b *testing.B) {
		tb := entityTable(b, 10000)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tb.Mut(42).SetU64(16, uint64(i))
			if i%1000 == 999 {
				tb.Hash()
			}
		}
	})
}

// BenchmarkRecomputeHash is the from-scratch hash of 10,000 entities that
// incremental hashing avoids.
func BenchmarkRecomputeHash(b *testing.B) {
	tb := entityTable(b, 10000)
	for b.Loop() {
		tb.RecomputeHash()
	}
}

// BenchmarkRestore rebuilds 10,000 entities from a full capture and a delta.
func BenchmarkRestore(b *testing.B) {
	tb := entityTable(b, 10000)
	full := tb.CaptureFull()
	dirtyTenPercent(tb, 1)
	delta := tb.Capture()
	r := mustNew(b, 1, 64, Options{})
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Restore(full, delta); err != nil {
			b.Fatal(err)
		}
	}
}
