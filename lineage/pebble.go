//go:build !js

// Pebble does not build for js/wasm: the browser viewer reads lineage and
// snapshots from recordings, never from a Pebble store.

package lineage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/anoptic/broadside/internal/pebbledb"
)

// Pebble key layout: a one-byte prefix, then for ranges the big-endian
// shard and first tick, so one shard's ranges are contiguous and in tick
// order and DeleteBefore is one range deletion.
const (
	pebPrefixFormat byte = 0x00 // format marker (one key)
	pebPrefixData   byte = 0x01 // encoded ranges: prefix | shard u32 | first tick u64
	pebPrefixInfo   byte = 0x02 // RangeInfo of each range, same suffix
	pebPrefixMeta   byte = 0x03 // named metadata: prefix | name
	pebPrefixEnd    byte = 0x04

	pebFormat  = "broadside-lineage/1"
	pebKeyLen  = 1 + 4 + 8
	pebInfoLen = 8 * 8 // upper bound of an encoded RangeInfo's varints
)

// PebbleOptions configures OpenPebble.
type PebbleOptions struct {
	// FS is the file system; nil means the operating system's. Tests pass
	// vfs.NewMem().
	FS vfs.FS
	// Sync makes every PutRange wait for the write-ahead log to be synced.
	// By default writes are not synced (lineage can be rebuilt by replaying
	// the log from a snapshot); Close makes them durable.
	Sync bool
	// Logger receives Pebble's messages; nil means slog.Default().
	Logger *slog.Logger
}

// PebbleStore is a Store on a Pebble database in one directory. Every
// stored value carries a CRC32C (ranges their own, RangeInfo values one
// appended), checked on read.
type PebbleStore struct {
	db    *pebbledb.DB
	write *pebble.WriteOptions
	dir   string

	mu     sync.RWMutex // held for reading by calls, for writing by Close
	closed bool
}

var _ Store = (*PebbleStore)(nil)

// OpenPebble opens (creating if needed) the lineage store in dir.
func OpenPebble(dir string, opts PebbleOptions) (*PebbleStore, error) {
	db, err := pebbledb.Open(dir, pebbledb.Options{FS: opts.FS, Logger: opts.Logger, Component: "lineage-pebble"})
	if err != nil {
		return nil, fmt.Errorf("lineage: open %s: %w", dir, err)
	}
	if err := db.CheckFormat([]byte{pebPrefixFormat}, pebFormat, ErrCorrupt); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("lineage: open %s: %w", dir, err)
	}
	w := pebble.NoSync
	if opts.Sync {
		w = pebble.Sync
	}
	return &PebbleStore{db: db, write: w, dir: dir}, nil
}

func pebRangeKey(prefix byte, shard ShardID, first uint64) []byte {
	k := make([]byte, pebKeyLen)
	k[0] = prefix
	binary.BigEndian.PutUint32(k[1:], uint32(shard))
	binary.BigEndian.PutUint64(k[5:], first)
	return k
}

// acquireWrite is acquire for a write: it first reopens the database,
// with every other call excluded, when an earlier write failed (ENOSPC,
// EIO): Pebble cannot write again in place (see pebbledb.DB). What was
// stored before stays; the failed write reported its error.
func (p *PebbleStore) acquireWrite(op string) (func(), error) {
	if p.db.Failed() != nil {
		p.mu.Lock()
		if !p.closed && p.db.Failed() != nil {
			if err := p.db.Reopen(); err != nil {
				p.mu.Unlock()
				return nil, fmt.Errorf("lineage: %s: reopen after a failed write: %w", op, err)
			}
		}
		p.mu.Unlock()
	}
	return p.acquire(op)
}

func (p *PebbleStore) acquire(op string) (func(), error) {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return nil, fmt.Errorf("lineage: %s: %w", op, ErrClosed)
	}
	return p.mu.RUnlock, nil
}

// PutRange implements Store: data and info are written in one batch.
func (p *PebbleStore) PutRange(ctx context.Context, info RangeInfo, data []byte) error {
	return p.writeBatch(ctx, fmt.Sprintf("put range %d/%d", info.Shard, info.FirstTick), func(b *pebble.Batch) error {
		if err := b.Set(pebRangeKey(pebPrefixData, info.Shard, info.FirstTick), data, nil); err != nil {
			return err
		}
		return b.Set(pebRangeKey(pebPrefixInfo, info.Shard, info.FirstTick), appendInfo(nil, info), nil)
	})
}

// writeBatch writes what fill puts in one batch, with the store's write
// lock held and its durability (op names the operation in errors).
func (p *PebbleStore) writeBatch(ctx context.Context, op string, fill func(*pebble.Batch) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lineage: %s: %w", op, err)
	}
	release, err := p.acquireWrite(op)
	if err != nil {
		return err
	}
	defer release()
	b := p.db.NewBatch()
	defer b.Close()
	if err := fill(b); err != nil {
		return fmt.Errorf("lineage: %s: %w", op, err)
	}
	if err := p.db.Apply(b, p.write); err != nil {
		return fmt.Errorf("lineage: %s: %w", op, err)
	}
	return nil
}

// appendInfo encodes info's fields other than shard and first tick (they
// are in the key) as uvarints followed by a CRC32C that also covers the
// key's fields.
func appendInfo(b []byte, info RangeInfo) []byte {
	b = binary.AppendUvarint(b, info.LastTick-info.FirstTick)
	b = binary.AppendUvarint(b, info.FirstPos)
	b = binary.AppendUvarint(b, info.LastPos)
	b = binary.AppendUvarint(b, uint64(info.Inputs))
	b = binary.AppendUvarint(b, uint64(info.Events))
	b = binary.AppendUvarint(b, uint64(info.Bytes))
	return binary.LittleEndian.AppendUint32(b, infoCRC(info.Shard, info.FirstTick, b))
}

func infoCRC(shard ShardID, first uint64, body []byte) uint32 {
	var k [12]byte
	binary.BigEndian.PutUint32(k[:], uint32(shard))
	binary.BigEndian.PutUint64(k[4:], first)
	return crc32.Update(crc32.Checksum(k[:], castagnoli), castagnoli, body)
}

func decodeInfo(key, v []byte) (RangeInfo, error) {
	var info RangeInfo
	if len(key) != pebKeyLen || len(v) < 4 || len(v) > pebInfoLen+4 {
		return info, fmt.Errorf("%w: range info key %x", ErrCorrupt, key)
	}
	info.Shard = ShardID(binary.BigEndian.Uint32(key[1:]))
	info.FirstTick = binary.BigEndian.Uint64(key[5:])
	body := v[:len(v)-4]
	if got, want := infoCRC(info.Shard, info.FirstTick, body), binary.LittleEndian.Uint32(v[len(v)-4:]); got != want {
		return info, fmt.Errorf("%w: range info %d/%d: checksum", ErrCorrupt, info.Shard, info.FirstTick)
	}
	c := cursor{b: body}
	span, fp, lp, in, ev, by := c.uvarint(), c.uvarint(), c.uvarint(), c.uvarint(), c.uvarint(), c.uvarint()
	switch {
	case c.err != nil || len(c.b) != 0:
		return info, fmt.Errorf("%w: range info %d/%d: malformed", ErrCorrupt, info.Shard, info.FirstTick)
	case span >= MaxRangeTicks || info.FirstTick > math.MaxUint64-span || fp > lp ||
		in > MaxRangeRawBytes || ev > MaxRangeRawBytes || by > math.MaxInt32:
		return info, fmt.Errorf("%w: range info %d/%d: out of range", ErrCorrupt, info.Shard, info.FirstTick)
	}
	info.LastTick = info.FirstTick + span
	info.FirstPos, info.LastPos = fp, lp
	info.Inputs, info.Events, info.Bytes = int(in), int(ev), int(by)
	return info, nil
}

// Ranges implements Store.
func (p *PebbleStore) Ranges(ctx context.Context) (out []RangeInfo, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: list ranges: %w", err)
	}
	release, err := p.acquire("list ranges")
	if err != nil {
		return nil, err
	}
	defer release()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pebPrefixInfo}, UpperBound: []byte{pebPrefixInfo + 1}})
	if err != nil {
		return nil, fmt.Errorf("lineage: list ranges: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("lineage: list ranges: %w", cerr)
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("lineage: list ranges: %w", err)
		}
		info, err := decodeInfo(it.Key(), v)
		if err != nil {
			return nil, fmt.Errorf("lineage: list ranges: %w", err)
		}
		out = append(out, info)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("lineage: list ranges: %w", err)
	}
	return out, nil
}

// GetRange implements Store.
func (p *PebbleStore) GetRange(ctx context.Context, shard ShardID, firstTick uint64) ([]byte, error) {
	op := fmt.Sprintf("get range %d/%d", shard, firstTick)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: %s: %w", op, err)
	}
	release, err := p.acquire(op)
	if err != nil {
		return nil, err
	}
	defer release()
	v, closer, err := p.db.Get(pebRangeKey(pebPrefixData, shard, firstTick))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("lineage: %s: %w", op, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lineage: %s: %w", op, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// DeleteBefore implements Store with two range deletions in one batch.
func (p *PebbleStore) DeleteBefore(ctx context.Context, shard ShardID, firstTick uint64) error {
	return p.writeBatch(ctx, fmt.Sprintf("delete before %d/%d", shard, firstTick), func(b *pebble.Batch) error {
		for _, prefix := range []byte{pebPrefixData, pebPrefixInfo} {
			if err := b.DeleteRange(pebRangeKey(prefix, shard, 0), pebRangeKey(prefix, shard, firstTick), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

func pebMetaKey(name string) []byte { return append([]byte{pebPrefixMeta}, name...) }

// PutMeta implements Store.
func (p *PebbleStore) PutMeta(ctx context.Context, name string, value []byte) error {
	op := fmt.Sprintf("put meta %q", name)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lineage: %s: %w", op, err)
	}
	release, err := p.acquireWrite(op)
	if err != nil {
		return err
	}
	defer release()
	if err := p.db.Set(pebMetaKey(name), value, p.write); err != nil {
		return fmt.Errorf("lineage: %s: %w", op, err)
	}
	return nil
}

// GetMeta implements Store.
func (p *PebbleStore) GetMeta(ctx context.Context, name string) ([]byte, error) {
	op := fmt.Sprintf("get meta %q", name)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: %s: %w", op, err)
	}
	release, err := p.acquire(op)
	if err != nil {
		return nil, err
	}
	defer release()
	v, closer, err := p.db.Get(pebMetaKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("lineage: %s: %w", op, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lineage: %s: %w", op, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Close waits for calls in progress and closes the database, making every
// write durable.
func (p *PebbleStore) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("lineage: close %s: %w", p.dir, err)
	}
	return nil
}
