package logbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/internal/report"
)

// BenchmarkAppend appends 100-byte records to each contender, closed loop,
// with 1, 64 and 256 concurrent appenders, reporting p50, p99 and the process's
// CPU time per append. It is the entry point for profiles of one contender:
//
//	go test -run '^$' -bench 'Append/lazylog-memory/appenders=1$' -benchtime 5000x \
//	    -cpuprofile /tmp/cpu.pprof ./internal/logbench
//
// For the side-by-side comparison use `broadside bench log`.
func BenchmarkAppend(b *testing.B) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range Contenders() {
		b.Run(c.Name, func(b *testing.B) {
			ctx := context.Background()
			sys, err := c.Start(ctx, Env{Dir: b.TempDir(), Logger: logger})
			if err != nil {
				b.Fatal(err)
			}
			defer sys.Close()
			payload := make([]byte, 100)
			for _, appenders := range []int{1, 64, 256} {
				b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
					closedLoop(ctx, sys, payload, appenders, 200, time.Minute, 10*time.Second) // warm up
					var msgs0 int64
					var kinds0 map[msg.Kind]int64
					if l, ok := sys.(*lazylog); ok {
						msgs0 = l.net.messages.Load()
						kinds0 = l.net.KindCounts()
					}
					b.ResetTimer()
					cpu0 := report.ProcessCPU()
					st := closedLoop(ctx, sys, payload, appenders, b.N, time.Hour, 10*time.Second)
					b.StopTimer()
					if st.Errors > 0 {
						b.Fatalf("%d appends failed", st.Errors)
					}
					b.ReportMetric(us(st.P50), "p50-us")
					b.ReportMetric(us(st.P99), "p99-us")
					b.ReportMetric(us(perOp(report.ProcessCPU()-cpu0, st.Ops)), "cpu-us/op")
					if l, ok := sys.(*lazylog); ok {
						// Messages between nodes (client, replicas, shards),
						// ordering included.
						b.ReportMetric(float64(l.net.messages.Load()-msgs0)/float64(st.Ops), "msgs/op")
						if testing.Verbose() {
							var parts []string
							for k, v := range l.net.KindCounts() {
								if d := v - kinds0[k]; d > 0 {
									parts = append(parts, fmt.Sprintf("%s %.3f", k, float64(d)/float64(st.Ops)))
								}
							}
							slices.Sort(parts)
							b.Logf("messages per append: %s", strings.Join(parts, ", "))
						}
					}
				})
			}
		})
	}
}
