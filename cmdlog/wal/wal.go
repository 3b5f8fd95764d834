// Package wal is a sequencing replica's write-ahead log on Pebble: each
// Append writes its operations in one synced batch (group commit: the node
// runtime hands over everything one round of messages produced), and Load
// returns them in order after a restart. In memory durability the replica
// only logs which views it started; in fsync durability it logs records,
// GCs and seals too, and acknowledges appends only after Append returned.
//
// A checkpoint (seq.PersistCheckpoint) holds everything the replica's
// recovery needs of the operations before it, so Append deletes them, by
// one range deletion in the checkpoint's own synced batch: the WAL holds
// the newest checkpoint and what followed it, and Load's work stays bounded
// however long the log has run.
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
	db *pebbledb.DB
	// first is the key of the oldest operation kept (the newest
	// checkpoint, once there is one); next the key the next one gets.
	first, next uint64
	buf         []byte
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
	w := &Pebble{db: db, first: 1, next: 1}
	it, err := db.NewIter(nil)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("wal: iterate: %w", err)
	}
	if it.Last() && len(it.Key()) == 8 {
		w.next = binary.BigEndian.Uint64(it.Key()) + 1
	}
	if it.First() && len(it.Key()) == 8 {
		w.first = binary.BigEndian.Uint64(it.Key())
	}
	if err := it.Close(); err != nil {
		db.Close()
		return nil, fmt.Errorf("wal: iterate: %w", err)
	}
	return w, nil
}

// Close closes the database.
func (w *Pebble) Close() error { return w.db.Close() }

// Append makes ops durable, in one synced batch. If ops hold a
// checkpoint, the same batch deletes every operation before the newest one.
// A failed Append stored nothing the caller may count on: the node retries
// the same ops, which are written under the same keys again (so a batch
// that was in fact synced before the error is overwritten with itself, not
// duplicated). After a failed write (ENOSPC, EIO) Pebble cannot write again
// in place, so the next Append first reopens the database.
func (w *Pebble) Append(ops []seq.PersistOp) (err error) {
	b, first, err := w.batch(ops)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := w.db.Apply(b.Batch, pebble.Sync); err != nil {
		w.next = b.next
		return fmt.Errorf("wal: commit: %w", err)
	}
	w.first = first
	return nil
}

// Pending is a write Start began: Wait returns once it is synced.
type Pending struct {
	w           *Pebble
	b           *pebble.Batch
	next, first uint64 // the WAL's keys before the write
}

// Start writes ops like Append but returns before they are synced: the
// caller may start the next writes (which Pebble group-commits with this
// one's sync) and must call Wait on the result, from any goroutine, in the
// order of the Starts. Nothing of ops is durable before Wait returned nil;
// then every write started before it is synced too. After a failed Start
// or Wait, Rewind to the first write that failed and write it and every
// write started after it again with Append (which reopens the database
// first), in order: they get the same keys.
func (w *Pebble) Start(ops []seq.PersistOp) (*Pending, error) {
	b, first, err := w.batch(ops)
	if err != nil {
		return nil, err
	}
	p := &Pending{w: w, b: b.Batch, next: b.next, first: w.first}
	if err := w.db.ApplyNoSyncWait(b.Batch, pebble.Sync); err != nil {
		b.Close()
		w.next = b.next
		return nil, fmt.Errorf("wal: commit: %w", err)
	}
	w.first = first
	return p, nil
}

// Wait waits until the write is synced, and releases it.
func (p *Pending) Wait() error {
	err := p.w.db.SyncWait(p.b)
	p.b.Close()
	if err != nil {
		return fmt.Errorf("wal: sync: %w", err)
	}
	return nil
}

// StartAppend is Start in the shape of node.PipelinedWAL.
func (w *Pebble) StartAppend(ops []seq.PersistOp) (wait func() error, rewind func(), err error) {
	p, err := w.Start(ops)
	if err != nil {
		return nil, nil, err
	}
	return p.Wait, func() { w.Rewind(p) }, nil
}

// Rewind makes the next write take the keys p's write took (p failed, or
// a write started before it did). Only on the goroutine that calls Start
// and Append.
func (w *Pebble) Rewind(p *Pending) { w.next, w.first = p.next, p.first }

type walBatch struct {
	*pebble.Batch
	next uint64 // the WAL's next key before the batch
}

// batch encodes ops into a new batch under the next keys (advancing
// w.next) and returns the key of the oldest operation kept after it.
func (w *Pebble) batch(ops []seq.PersistOp) (_ walBatch, first uint64, err error) {
	if w.db.Failed() != nil {
		if err := w.db.Reopen(); err != nil {
			return walBatch{}, 0, fmt.Errorf("wal: reopen after a failed write: %w", err)
		}
	}
	b := walBatch{Batch: w.db.NewBatch(), next: w.next}
	defer func() {
		if err != nil {
			b.Close()
			w.next = b.next
		}
	}()
	var key [8]byte
	first = w.first
	for _, op := range ops {
		w.buf = encodeOp(w.buf[:0], op)
		binary.BigEndian.PutUint64(key[:], w.next)
		if err := b.Set(key[:], w.buf, nil); err != nil {
			return walBatch{}, 0, fmt.Errorf("wal: append: %w", err)
		}
		if op.Kind == seq.PersistCheckpoint {
			first = w.next
		}
		w.next++
	}
	if first > w.first {
		var from [8]byte
		binary.BigEndian.PutUint64(from[:], w.first)
		binary.BigEndian.PutUint64(key[:], first)
		if err := b.DeleteRange(from[:], key[:], nil); err != nil {
			return walBatch{}, 0, fmt.Errorf("wal: delete before checkpoint: %w", err)
		}
	}
	return b, first, nil
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
	case seq.PersistFloor:
		dst = codec.Encode(dst, msg.Append{Floors: op.Floor})
	case seq.PersistGC:
		dst = codec.Encode(dst, op.GC)
	case seq.PersistCheckpoint:
		dst = encodeCheckpoint(dst, op.Checkpoint)
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
	if op.Kind == seq.PersistCheckpoint {
		cp, err := decodeCheckpoint(b[5:])
		if err != nil {
			return seq.PersistOp{}, err
		}
		op.Checkpoint = cp
		// One encoding per checkpoint (the chunking is the encoder's).
		if string(encodeCheckpoint(nil, cp)) != string(b[5:]) {
			return seq.PersistOp{}, fmt.Errorf("%w: checkpoint not in canonical form", ErrCorrupt)
		}
		return op, nil
	}
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
		if op.Kind == seq.PersistRecords && len(v.Floors) == 0 {
			op.Records = v.Records
			return op, nil
		}
		if op.Kind == seq.PersistFloor && len(v.Records) == 0 {
			op.Floor = v.Floors
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

// A checkpoint is encoded as: sealed (1 byte), last-ordered-gp and
// stable-gp (8 bytes each, big-endian), then frames of cmdlog/codec, each
// a tag (1 byte) and a length (4 bytes): the view (a StartView), then the
// dedup marks (StartViews holding only marks), the ordered entries
// (Stores) and the unordered records (Appends), each list in chunks that
// stay inside the codec's limits.
const (
	tagView      = 'v'
	tagDedup     = 'd'
	tagOrdered   = 'o'
	tagUnordered = 'u'

	chunkItems = 8192
	chunkBytes = 4 << 20
)

func encodeCheckpoint(dst []byte, cp *seq.Checkpoint) []byte {
	if cp == nil {
		cp = &seq.Checkpoint{}
	}
	sealed := byte(0)
	if cp.Sealed {
		sealed = 1
	}
	dst = append(dst, sealed)
	dst = binary.BigEndian.AppendUint64(dst, cp.LastOrderedGP)
	dst = binary.BigEndian.AppendUint64(dst, cp.StableGP)
	frame := func(dst []byte, tag byte, m msg.Message) []byte {
		dst = append(dst, tag, 0, 0, 0, 0)
		at := len(dst)
		dst = codec.Encode(dst, m)
		binary.BigEndian.PutUint32(dst[at-4:], uint32(len(dst)-at))
		return dst
	}
	dst = frame(dst, tagView, msg.StartView{View: cp.View})
	for marks := cp.Dedup; len(marks) > 0; {
		n, items := 0, 0
		for n < len(marks) && n < chunkItems/2 && (n == 0 || items+len(marks[n].Above) <= chunkItems) {
			items += len(marks[n].Above)
			n++
		}
		dst = frame(dst, tagDedup, msg.StartView{View: msg.ViewRecord{Dedup: marks[:n]}})
		marks = marks[n:]
	}
	for es := cp.Ordered; len(es) > 0; {
		n, bytes := 0, 0
		for n < len(es) && n < chunkItems && (n == 0 || bytes+len(es[n].Record.Data) <= chunkBytes) {
			bytes += len(es[n].Record.Data)
			n++
		}
		dst = frame(dst, tagOrdered, msg.Store{Entries: es[:n]})
		es = es[n:]
	}
	for rs := cp.Unordered; len(rs) > 0; {
		n, bytes := 0, 0
		for n < len(rs) && n < chunkItems && (n == 0 || bytes+len(rs[n].Data) <= chunkBytes) {
			bytes += len(rs[n].Data)
			n++
		}
		dst = frame(dst, tagUnordered, msg.Append{Records: rs[:n]})
		rs = rs[n:]
	}
	return dst
}

func decodeCheckpoint(b []byte) (*seq.Checkpoint, error) {
	if len(b) < 17 || b[0] > 1 {
		return nil, fmt.Errorf("%w: checkpoint header", ErrCorrupt)
	}
	cp := &seq.Checkpoint{Sealed: b[0] == 1, LastOrderedGP: binary.BigEndian.Uint64(b[1:]), StableGP: binary.BigEndian.Uint64(b[9:])}
	b = b[17:]
	for i := 0; len(b) > 0; i++ {
		if len(b) < 5 {
			return nil, fmt.Errorf("%w: checkpoint frame header", ErrCorrupt)
		}
		tag, n := b[0], binary.BigEndian.Uint32(b[1:])
		if uint64(n) > uint64(len(b)-5) {
			return nil, fmt.Errorf("%w: checkpoint frame of %d bytes", ErrCorrupt, n)
		}
		if (i == 0) != (tag == tagView) {
			return nil, fmt.Errorf("%w: checkpoint frame %d tagged %q", ErrCorrupt, i, tag)
		}
		m, err := codec.Decode(b[5 : 5+n])
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint frame %d: %v", ErrCorrupt, i, err)
		}
		b = b[5+n:]
		switch v := m.(type) {
		case msg.StartView:
			switch tag {
			case tagView:
				cp.View = v.View
				continue
			case tagDedup:
				cp.Dedup = append(cp.Dedup, v.View.Dedup...)
				continue
			}
		case msg.Store:
			if tag == tagOrdered {
				cp.Ordered = append(cp.Ordered, v.Entries...)
				continue
			}
		case msg.Append:
			if tag == tagUnordered {
				cp.Unordered = append(cp.Unordered, v.Records...)
				continue
			}
		}
		return nil, fmt.Errorf("%w: checkpoint frame %d tagged %q holds %s", ErrCorrupt, i, tag, m.Kind())
	}
	return cp, nil
}
