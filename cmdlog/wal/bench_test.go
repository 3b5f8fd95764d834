package wal

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/internal/report"
)

// BenchmarkAppendSynced appends one 100-byte record per operation to
// each of n WALs on the OS's file system at once, as the 3 sequencing
// replicas of an fsync-durability append do on one machine: the floor of
// that append's persistence (each Append is a synced Pebble commit). It
// reports the p50 and p99 of an operation (all n synced) besides the mean,
// which a shared disk's stalls dominate.
//
//	go test -run '^$' -bench AppendSynced -benchtime 2000x ./cmdlog/wal
func BenchmarkAppendSynced(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("wals=%d", n), func(b *testing.B) {
			ws := make([]*Pebble, n)
			for i := range ws {
				w, err := Open(filepath.Join(b.TempDir(), "wal"), Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				ws[i] = w
			}
			data := make([]byte, 100)
			lat := report.NewDurations()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				ops := []seq.PersistOp{{Kind: seq.PersistRecords, Records: []msg.Record{{ID: msg.RecordID{Client: 7, Seq: uint64(i)}, Data: data}}}}
				var wg sync.WaitGroup
				errs := make([]error, n)
				for j, w := range ws {
					wg.Add(1)
					go func() { defer wg.Done(); errs[j] = w.Append(ops) }()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				lat.Record(time.Since(start))
			}
			b.ReportMetric(report.Us(lat.Quantile(0.50)), "p50-us")
			b.ReportMetric(report.Us(lat.Quantile(0.99)), "p99-us")
		})
	}
}
