package coord

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkCompareAndSet measures one compare-and-set round trip of a
// typical record: in memory, and on an embedded single-node server with
// each fsync policy (the cost of SyncAlways).
func BenchmarkCompareAndSet(b *testing.B) {
	run := func(b *testing.B, c Coordinator) {
		ctx := context.Background()
		rev, err := c.CompareAndSet(ctx, 0, sampleRecord(1))
		if err != nil {
			b.Fatal(err)
		}
		rec := sampleRecord(2)
		b.ReportAllocs()
		for b.Loop() {
			if rev, err = c.CompareAndSet(ctx, rev, rec); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, NewMemory()) })
	for _, sync := range []SyncPolicy{SyncAlways, SyncPeriodic} {
		b.Run("nats/sync="+sync.String(), func(b *testing.B) {
			srv, err := StartEmbeddedNATS(EmbeddedOptions{StoreDir: b.TempDir(), Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			c, err := NewNATS(context.Background(), js, NATSConfig{Cluster: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			run(b, c)
		})
	}
}
