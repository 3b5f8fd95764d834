package cmdlog

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/cmdlog/wal"
)

// DiskStorage keeps an in-process cluster's shard stores and write-ahead
// logs in Pebble databases under Dir (shard-ID, wal-ID); pass its NewStorage
// and NewWAL to LocalConfig, and Close it after the cluster.
type DiskStorage struct {
	Dir    string
	Logger *slog.Logger

	mu      sync.Mutex
	closers []io.Closer
}

// NewStorage opens shard id's store (synced writes).
func (d *DiskStorage) NewStorage(id msg.NodeID) (shard.Storage, error) {
	st, err := shardstore.Open(filepath.Join(d.Dir, fmt.Sprintf("shard-%d", id)), shardstore.Options{Logger: d.Logger})
	if err != nil {
		return nil, err
	}
	d.keep(st)
	return st, nil
}

// NewWAL opens replica id's write-ahead log.
func (d *DiskStorage) NewWAL(id msg.NodeID) (node.WAL, error) {
	w, err := wal.Open(filepath.Join(d.Dir, fmt.Sprintf("wal-%d", id)), wal.Options{Logger: d.Logger})
	if err != nil {
		return nil, err
	}
	d.keep(w)
	return w, nil
}

func (d *DiskStorage) keep(c io.Closer) {
	d.mu.Lock()
	d.closers = append(d.closers, c)
	d.mu.Unlock()
}

// Close closes every database opened.
func (d *DiskStorage) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.closers {
		c.Close()
	}
	d.closers = nil
}

// A replica in fsync durability pipelines its WAL writes on wal.Pebble.
var _ node.PipelinedWAL = (*wal.Pebble)(nil)
