// Package wal is a sequencing replica's write-ahead log on Pebble: each
// Append writes its operations in one synced batch (group commit: the node
// runtime hands over everything one round of messages produced), and Load
// returns them in order after a restart. In memory durability the replica
// only logs which views it started; in fsync durability it logs records,
// GCs and seals too, and acknowledges appends only after Append returned.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/internal/pebbledb"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrCorrupt is returned by Load when a stored operation fails its checksum
// or does not decode.
var ErrCorrupt = errors.New("wal: corrupt operation")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Pebble is a WAL stored in a Pebble database.
type Pebble struct {
	db   *pebbledb.DB
	next uint64
	buf  []byte
}

// Options configure Open.
type Options struct {
	// FS is the filesystem (default: the OS's). Tests pass vfs.NewMem().
	FS vfs.FS
	// Logger receives Pebble's messages (routine ones at debug level).
	Logger *slog.Logger
}

// Open opens (creating if needed) the WAL in dir.
func Open(dir string, opts Options) (*Pebble, error) {
	db, err := pebbledb.Open(dir, pebbledb.Options{FS: opts.FS, Logger: opts.Logger, Component: "wal-pebble"})
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	w := &Pebble{db: db, next: 1}
	it, err := db.NewIter(nil)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("wal: iterate: %w", err)
	}
	if it.Last() && len(it.Key()) == 8 {
		w.next = binary.BigEndian.Uint64(it.Key()) + 1
	}
	if err := it.Close(); err != nil {
		db.Close()
		return nil, fmt.Errorf("wal: iterate: %w", err)
	}
	return w, nil
}

// Close closes the database.
func (w *Pebble) Close() error { return w.db.Close() }

// Append makes ops durable, in one synced batch. A failed Append stored
// nothing the caller may count on: the node retries the same ops, which
// are written under the same keys again (so a batch that was in fact
// synced before the error is overwritten with itself, not duplicated).
// After a failed write (ENOSPC, EIO) Pebble cannot write again in place,
// so the next Append first reopens the database.
func (w *Pebble) Append(ops []seq.PersistOp) (err error) {
	if w.db.Failed() != nil {
		if err := w.db.Reopen(); err != nil {
			return fmt.Errorf("wal: reopen after a failed write: %w", err)
		}
	}
	first := w.next
	defer func() {
		if err != nil {
			w.next = first
		}
	}()
	b := w.db.NewBatch()
	defer b.Close()
	var key [8]byte
	for _, op := range ops {
		w.buf = encodeOp(w.buf[:0], op)
		binary.BigEndian.PutUint64(key[:], w.next)
		if err := b.Set(key[:], w.buf, nil); err != nil {
			return fmt.Errorf("wal: append: %w", err)
		}
		w.next++
	}
	if err := w.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("wal: commit: %w", err)
	}
	return nil
}

// Load returns every operation in the WAL, in order.
func (w *Pebble) Load() ([]seq.PersistOp, error) {
	it, err := w.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("wal: iterate: %w", err)
	}
	defer it.Close()
	var ops []seq.PersistOp
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("wal: read: %w", err)
		}
		op, err := DecodeOp(v)
		if err != nil {
			return nil, fmt.Errorf("wal: operation %x: %w", it.Key(), err)
		}
		ops = append(ops, op)
	}
	return ops, it.Error()
}

// encodeOp encodes an operation: CRC32C (4 bytes) over kind (1 byte) and
// the operation's message encoded with cmdlog/codec.
func encodeOp(dst []byte, op seq.PersistOp) []byte {
	dst = append(dst, 0, 0, 0, 0, byte(op.Kind))
	switch op.Kind {
	case seq.PersistStartView:
		dst = codec.Encode(dst, msg.StartView{View: op.View})
	case seq.PersistRecords:
		dst = codec.Encode(dst, msg.Append{Records: op.Records})
	case seq.PersistGC:
		dst = codec.Encode(dst, op.GC)
	}
	binary.BigEndian.PutUint32(dst, crc32.Checksum(dst[4:], castagnoli))
	return dst
}

// DecodeOp decodes one stored operation, validating everything.
func DecodeOp(b []byte) (seq.PersistOp, error) {
	if len(b) < 5 {
		return seq.PersistOp{}, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if crc32.Checksum(b[4:], castagnoli) != binary.BigEndian.Uint32(b) {
		return seq.PersistOp{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	op := seq.PersistOp{Kind: seq.PersistKind(b[4])}
	if op.Kind == seq.PersistSeal {
		if len(b) != 5 {
			return seq.PersistOp{}, fmt.Errorf("%w: seal with payload", ErrCorrupt)
		}
		return op, nil
	}
	m, err := codec.Decode(b[5:])
	if err != nil {
		return seq.PersistOp{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch v := m.(type) {
	case msg.StartView:
		if op.Kind == seq.PersistStartView {
			op.View = v.View
			return op, nil
		}
	case msg.Append:
		if op.Kind == seq.PersistRecords {
			op.Records = v.Records
			return op, nil
		}
	case msg.GC:
		if op.Kind == seq.PersistGC {
			op.GC = v
			return op, nil
		}
	}
	return seq.PersistOp{}, fmt.Errorf("%w: kind %d holds %s", ErrCorrupt, op.Kind, m.Kind())
}
