package natscoord

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog/coord/coordtest"
)

// BenchmarkCompareAndSet measures one compare-and-set round trip of a
// typical record on an embedded single-node server with each fsync policy
// (the cost of SyncAlways; coord's benchmark measures the same in memory).
func BenchmarkCompareAndSet(b *testing.B) {
	for _, sync := range []SyncPolicy{SyncAlways, SyncPeriodic} {
		b.Run("sync="+sync.String(), func(b *testing.B) {
			srv, err := StartEmbedded(EmbeddedOptions{StoreDir: b.TempDir(), Sync: sync})
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
			c, err := New(context.Background(), js, Config{Cluster: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			coordtest.BenchCompareAndSet(b, c)
		})
	}
}
