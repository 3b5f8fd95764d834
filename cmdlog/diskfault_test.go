package cmdlog

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/cmdlog/wal"
	"github.com/anoptic/broadside/internal/pebbledb/pebbletest"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestDiskFaultWithholdsAcknowledgements runs a cluster in fsync
// durability on Pebble WALs and shard stores over errorfs. While the
// replicas' WALs fail with ENOSPC (one disk under them all, as in the
// embedded cluster: one failing replica alone is a failed node, and a
// view change leaves it out), no append is acknowledged and the health
// names the replicas; when the disk recovers, the nodes (which did not
// exit) store again by themselves and the pending append completes. Then an
// EIO on shard 101's store: appends are still acknowledged by the
// replicas, but the positions the shard holds are not readable (stable)
// until its store recovers. Every record is read back exactly once.
func TestDiskFaultWithholdsAcknowledgements(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	walDisk := map[msg.NodeID]*errorfs.Toggle{}
	shardDisk := map[msg.NodeID]*errorfs.Toggle{}
	var health node.StorageHealth
	lc, err := StartLocal(context.Background(), LocalConfig{
		Coordinator: &testCoord{}, Network: node.NewLocalNet(), Durability: seq.Fsync, Logger: quiet,
		Timing: node.Timing{Tick: 2 * time.Millisecond}, Health: &health,
		// A replica whose WAL fails stalls its loop in the retries; on a
		// loaded machine the default 40 ms of silence then suspects it, and
		// a view change started while a shard's disk fails cannot flush
		// until it recovers. This test is about acknowledgements, not view
		// changes: 1 s of silence before a suspicion.
		Core: seq.Config{SuspectTicks: 500},
		NewStorage: func(id msg.NodeID) (shard.Storage, error) {
			shardDisk[id] = pebbletest.FailingDisk(syscall.EIO)
			return shardstore.Open("shard", shardstore.Options{FS: errorfs.Wrap(vfs.NewMem(), shardDisk[id]), Logger: quiet})
		},
		NewWAL: func(id msg.NodeID) (node.WAL, error) {
			walDisk[id] = pebbletest.FailingDisk(syscall.ENOSPC)
			return wal.Open("wal", wal.Options{FS: errorfs.Wrap(vfs.NewMem(), walDisk[id]), Logger: quiet})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	c := lc.NewClient(ClientConfig{})
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	appendOne := func(ctx context.Context) error {
		n++
		return c.AppendWithID(ctx, msg.RecordID{Client: 99, Seq: uint64(n)}, []byte{byte(n)})
	}
	for range 5 {
		if err := appendOne(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for _, d := range walDisk {
		d.On()
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	err = appendOne(short)
	cancelShort()
	if err == nil {
		t.Fatal("an append was acknowledged while the WALs could not store")
	}
	if h := health.Err(); h == nil || !regexp.MustCompile(`seq [123]'s WAL`).MatchString(h.Error()) || !strings.Contains(h.Error(), "no space left on device") {
		t.Fatalf("health while the WAL fails: %v", h)
	}
	pending := make(chan error, 1)
	go func() { pending <- c.AppendWithID(ctx, msg.RecordID{Client: 99, Seq: uint64(n)}, []byte{byte(n)}) }()
	select {
	case err := <-pending:
		t.Fatalf("the append completed while the WAL failed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	for _, d := range walDisk {
		d.Off()
	}
	if err := <-pending; err != nil {
		t.Fatalf("the append after the WAL recovered: %v", err)
	}
	waitHealthy(t, &health)

	shardDisk[101].On()
	for range 5 {
		if err := appendOne(ctx); err != nil {
			t.Fatalf("append while a shard fails (the replicas store it): %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for health.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if h := health.Err(); h == nil || !strings.Contains(h.Error(), "shard 101's store") {
		t.Fatalf("health while the shard store fails: %v", h)
	}
	shardDisk[101].Off()
	waitHealthy(t, &health)

	seen := map[uint64]int{}
	for pos := uint64(1); len(seen) < n; {
		es, err := c.Read(ctx, pos, 100)
		if err != nil {
			t.Fatalf("read from %d (have %d of %d): %v", pos, len(seen), n, err)
		}
		for _, e := range es {
			seen[e.Record.ID.Seq]++
			pos = e.Pos + 1
		}
	}
	for s := 1; s <= n; s++ {
		if seen[uint64(s)] != 1 {
			t.Fatalf("record %d is in the log %d times", s, seen[uint64(s)])
		}
	}
}

func waitHealthy(t *testing.T, h *node.StorageHealth) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("storage did not recover: %v", h.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
