// Package table holds a game's mutable state in fixed-size records grouped
// in pages, so that the engine can snapshot and verify it without knowing
// the game:
//
//   - every write goes through Table.Mut, which sets the page's dirty bit;
//     Table.Capture copies only the pages written since the previous capture
//     (the tick loop pauses for that copy alone) and Table.Restore rebuilds a
//     table from a full capture plus the deltas taken after it;
//   - the table hash is the sum (mod 2^64) of a per-record hash
//     h(table id, slot, record bytes) over live slots. A record written in a
//     tick is re-hashed once when the hash is next read (its old hash is
//     cached), so the cost of keeping the state hash is proportional to the
//     number of records written, not to the size of the state;
//   - slots are allocated deterministically, lowest free slot first (the
//     allocator state is then exactly the occupancy bitmap) or, for
//     short-lived entities, next-fit from a cursor (so entities created
//     together share pages and a capture stays small); every capture carries
//     the bitmap and the cursor, and the hash covers both;
//   - freeing a slot does not write its page: a free slot's bytes are
//     unspecified and Alloc zeroes them, so deaths do not dirty pages.
//
// A Set combines the tables of one simulation shard into one state hash and
// one capture. Captures encode to a checksummed binary form (CRC32C) whose
// decoder validates every field. Nothing here allocates on the read/write
// path in steady state, and nothing depends on map order, time or
// goroutines.
package table

import (
	"errors"
	"fmt"
	"math/bits"
)

// Limits that keep a table (and any decoded capture) to a sane size.
const (
	// MaxRecordSize is the largest record size in bytes.
	MaxRecordSize = 1 << 16
	// MaxRecordsPerPage is the largest number of records in a page.
	MaxRecordsPerPage = 1 << 16
	// MaxPageBytes is the largest page size in bytes.
	MaxPageBytes = 1 << 22
	// MaxSlots is the largest number of slots a table may have.
	MaxSlots = 1 << 26
	// DefaultRecordsPerPage is used when Options.RecordsPerPage is 0:
	// 64 records per page, so a page of 64-byte records is 4 KiB.
	DefaultRecordsPerPage = 64
)

// ErrFull is returned by Alloc when the table holds Options.MaxRecords
// records.
var ErrFull = errors.New("table: full")

// Policy is a slot allocation policy. Both are deterministic.
type Policy uint8

const (
	// LowestFree allocates the lowest free slot: the table stays compact,
	// and the allocator state is the occupancy bitmap alone.
	LowestFree Policy = iota
	// NextFit allocates the first free slot at or after a cursor that
	// follows the last allocation. At the end of the table it wraps
	// around to slot 0 if at most half the slots are live, and otherwise
	// grows (up to twice MaxRecords slots). Entities created in the same
	// tick get neighbouring slots and, thanks to the slack, the cursor
	// comes back to a region only after its cohort has died, so for
	// entities that live and die in cohorts (projectiles) a tick's births
	// touch few pages.
	NextFit
)

// Options configure a Table.
type Options struct {
	// Policy is the slot allocation policy (default LowestFree).
	Policy Policy
	// RecordsPerPage is the number of records per page, a power of two (0
	// means DefaultRecordsPerPage). Smaller pages make deltas finer; larger
	// pages make captures cheaper per byte.
	RecordsPerPage int
	// MaxRecords bounds the number of live records (0 means MaxSlots).
	MaxRecords int
}

// Table is a set of fixed-size records addressed by slot. It is not safe for
// concurrent use: one simulation shard owns it.
type Table struct {
	id        uint32
	recSize   int
	perPage   int
	pageShift uint
	maxRecs   int
	policy    Policy

	// data holds every slot's record, slot i at i*recSize: one slice, so
	// that reaching a record is a multiply and one bounds check. pages are
	// its pages (views of data, for captures). Growing past data's
	// capacity moves it (Records are valid until the table grows).
	data  []byte
	pages [][]byte // each perPage*recSize bytes, views of data
	slots int      // len(pages) * perPage
	live  []uint64 // occupancy bitmap, ceil(slots/64) words
	count int      // live records
	// lowFree is a lower bound of the lowest free slot: every slot below
	// it is live (LowestFree).
	lowFree int
	// cursor is where the next NextFit search starts; it is part of the
	// state (captured and hashed).
	cursor int
	dirty  []uint64 // one bit per page, set by writes since the last capture

	// pendBits has one bit per slot: record written, hash not updated;
	// pendSum one bit per word of pendBits that may be nonzero, so that
	// a commit visits the written records in slot order, a word at a
	// time, and costs one record hash per record written (plus a word
	// of pendSum per 4,096 slots), whatever the table's size.
	pendBits []uint64
	pendSum  []uint64
	pending  bool     // some pendBits are set
	recHash  []uint64 // hash of each live record as of its last update
	hash     uint64   // sum of recHash over live slots
	epoch    uint64   // number of the last capture (0: none)

	ft *fieldTrack // field sums (nil: not tracked; see TrackFields)
}

// New returns an empty table. id names the table in hashes and captures (a
// game gives each of its tables a distinct id); recordSize is the size of
// every record in bytes.
func New(id uint32, recordSize int, opts Options) (*Table, error) {
	if recordSize <= 0 || recordSize > MaxRecordSize {
		return nil, fmt.Errorf("table %d: record size %d out of range [1, %d]", id, recordSize, MaxRecordSize)
	}
	per := opts.RecordsPerPage
	if per == 0 {
		per = DefaultRecordsPerPage
	}
	if per < 1 || per > MaxRecordsPerPage || per&(per-1) != 0 {
		return nil, fmt.Errorf("table %d: records per page %d is not a power of two in [1, %d]", id, per, MaxRecordsPerPage)
	}
	if per*recordSize > MaxPageBytes {
		return nil, fmt.Errorf("table %d: page of %d records of %d bytes exceeds %d bytes", id, per, recordSize, MaxPageBytes)
	}
	maxRecs := opts.MaxRecords
	if maxRecs == 0 {
		maxRecs = MaxSlots
	}
	if maxRecs < 0 || maxRecs > MaxSlots {
		return nil, fmt.Errorf("table %d: max records %d out of range [1, %d]", id, maxRecs, MaxSlots)
	}
	if opts.Policy > NextFit {
		return nil, fmt.Errorf("table %d: unknown allocation policy %d", id, opts.Policy)
	}
	t := &Table{
		id:        id,
		recSize:   recordSize,
		perPage:   per,
		pageShift: uint(bits.TrailingZeros(uint(per))),
		maxRecs:   maxRecs,
		policy:    opts.Policy,
	}
	t.hash = t.cursorHash()
	return t, nil
}

// cursorHash is the NextFit cursor's term of the table hash (0 for
// LowestFree, whose allocator state is covered by the live records).
func (t *Table) cursorHash() uint64 {
	if t.policy != NextFit {
		return 0
	}
	return mum(uint64(t.id)^wyP1, uint64(t.cursor)^wyP0^wyP3)
}

// ID returns the table's id.
func (t *Table) ID() uint32 { return t.id }

// RecordSize returns the size of a record in bytes.
func (t *Table) RecordSize() int { return t.recSize }

// RecordsPerPage returns the number of records per page.
func (t *Table) RecordsPerPage() int { return t.perPage }

// PageBytes returns the size of a page in bytes.
func (t *Table) PageBytes() int { return t.perPage * t.recSize }

// Len returns the number of live records.
func (t *Table) Len() int { return t.count }

// Slots returns the number of slots (live or free) the table has pages for.
// Every live slot is below it.
func (t *Table) Slots() int { return t.slots }

// Pages returns the number of pages.
func (t *Table) Pages() int { return len(t.pages) }

// Policy returns the table's allocation policy.
func (t *Table) Policy() Policy { return t.policy }

// Epoch returns the number of the last capture taken or restored (0 if
// none). A delta capture applies on top of the capture numbered one less.
func (t *Table) Epoch() uint64 { return t.epoch }

// Live reports whether slot i holds a record.
func (t *Table) Live(i int) bool {
	return uint(i) < uint(t.slots) && t.live[i>>6]&(1<<(uint(i)&63)) != 0
}

// NextLive returns the lowest live slot ≥ i, or -1 if there is none. Games
// iterate in deterministic slot order with
//
//	for i := t.NextLive(0); i >= 0; i = t.NextLive(i + 1) { ... }
//
// Freeing the current slot during the loop is allowed; slots allocated
// during the loop are visited if they are above the current one.
func (t *Table) NextLive(i int) int {
	if i < 0 {
		i = 0
	}
	if i >= t.slots {
		return -1
	}
	w := i >> 6
	word := t.live[w] &^ (1<<(uint(i)&63) - 1)
	for {
		if word != 0 {
			return w<<6 | bits.TrailingZeros64(word)
		}
		w++
		if w >= len(t.live) {
			return -1
		}
		word = t.live[w]
	}
}

// NextLiveExcept is NextLive skipping the slots whose bit is set in skip
// (bit i&63 of skip[i>>6]; words past its end skip nothing): a game that
// knows some records need no work this tick iterates the others without
// visiting them, in the same slot order.
func (t *Table) NextLiveExcept(i int, skip []uint64) int {
	if i < 0 {
		i = 0
	}
	if i >= t.slots {
		return -1
	}
	w := i >> 6
	word := t.live[w] &^ (1<<(uint(i)&63) - 1)
	for {
		if w < len(skip) {
			word &^= skip[w]
		}
		if word != 0 {
			return w<<6 | bits.TrailingZeros64(word)
		}
		w++
		if w >= len(t.live) {
			return -1
		}
		word = t.live[w]
	}
}

// Alloc takes a free slot by the table's policy, zeroes its record and
// returns it. It returns ErrFull when the table holds Options.MaxRecords
// records.
func (t *Table) Alloc() (int, error) {
	if t.count >= t.maxRecs {
		return -1, ErrFull
	}
	var i int
	if t.policy == NextFit {
		i = t.freeFrom(t.cursor)
		// Wrap around only while at most half the slots are live (or the
		// table cannot grow): the slack lets the cohorts ahead of the
		// cursor die before it comes back, so it finds runs of free
		// slots instead of scattered holes.
		if i >= t.slots && t.cursor > 0 && (2*t.count <= t.slots || t.slots+t.perPage > 2*t.maxRecs) {
			i = t.freeFrom(0)
		}
	} else {
		i = t.lowestFree()
	}
	if i >= t.slots {
		i = t.slots
		t.grow()
	}
	t.live[i>>6] |= 1 << (uint(i) & 63)
	t.count++
	if t.ft != nil {
		t.addLive(i, false)
	}
	if t.policy == NextFit {
		t.hash -= t.cursorHash()
		t.cursor = i + 1
		t.hash += t.cursorHash()
	} else {
		t.lowFree = i + 1
	}
	clear(t.record(i))
	t.markDirty(i)
	t.markPending(i)
	return i, nil
}

// freeFrom returns the first free slot at or after i, or t.slots.
func (t *Table) freeFrom(i int) int {
	if i >= t.slots {
		return t.slots
	}
	w := i >> 6
	free := ^t.live[w] &^ (1<<(uint(i)&63) - 1)
	for {
		if free != 0 {
			return min(w<<6|bits.TrailingZeros64(free), t.slots)
		}
		w++
		if w >= len(t.live) {
			return t.slots
		}
		free = ^t.live[w]
	}
}

// lowestFree returns the lowest free slot, or t.slots if all are live.
func (t *Table) lowestFree() int {
	for w := t.lowFree >> 6; w < len(t.live); w++ {
		if free := ^t.live[w]; free != 0 {
			i := w<<6 | bits.TrailingZeros64(free)
			if i < t.slots {
				return i
			}
			break
		}
	}
	return t.slots
}

// grow adds one zeroed page.
func (t *Table) grow() {
	pb := t.perPage * t.recSize
	n := len(t.data) + pb
	if n > cap(t.data) {
		// Move to a backing twice as large (zeroed: the bytes beyond
		// len(data) are never written, so a later grow within the
		// capacity finds its page zeroed).
		data := make([]byte, n, max(2*cap(t.data), n))
		copy(data, t.data)
		t.data = data
		for pg := range t.pages {
			t.pages[pg] = t.data[pg*pb : (pg+1)*pb : (pg+1)*pb]
		}
	} else {
		t.data = t.data[:n]
	}
	t.pages = append(t.pages, t.data[n-pb:n:n])
	t.slots += t.perPage
	words := (t.slots + 63) >> 6
	for len(t.live) < words {
		t.live = append(t.live, 0)
		t.pendBits = append(t.pendBits, 0)
	}
	for len(t.pendSum) < (words+63)>>6 {
		t.pendSum = append(t.pendSum, 0)
	}
	for len(t.recHash) < t.slots {
		t.recHash = append(t.recHash, 0)
	}
	for len(t.dirty) < (len(t.pages)+63)>>6 {
		t.dirty = append(t.dirty, 0)
	}
	pg := len(t.pages) - 1
	t.dirty[pg>>6] |= 1 << (uint(pg) & 63)
	if t.ft != nil {
		t.ft.slot = append(t.ft.slot, make([]uint32, t.perPage*FieldSyndromes)...)
	}
}

// Free releases slot i. It does not write the record (so it does not dirty
// the page): a free slot's bytes are unspecified until Alloc zeroes them.
// Freeing a slot that is not live is a bug of the caller and panics.
func (t *Table) Free(i int) {
	if !t.Live(i) {
		panic(fmt.Sprintf("table %d: Free of slot %d which is not live", t.id, i))
	}
	t.hash -= t.recHash[i]
	t.recHash[i] = 0
	if t.ft != nil {
		t.unsumRecord(i)
		t.addLive(i, true)
	}
	t.live[i>>6] &^= 1 << (uint(i) & 63)
	t.count--
	if i < t.lowFree {
		t.lowFree = i
	}
}

// record returns slot i's bytes without any bookkeeping.
func (t *Table) record(i int) Record {
	off := i * t.recSize
	return t.data[off : off+t.recSize : off+t.recSize]
}

// Row returns slot i's record for reading; a free slot's bytes are
// unspecified. It panics if i is not below Slots.
func (t *Table) Row(i int) Record {
	if uint(i) >= uint(t.slots) {
		panic(rowError{t.id, i, t.slots}) // small enough for Row to inline
	}
	return t.record(i)
}

// rowError is Row's panic value.
type rowError struct {
	table    uint32
	i, slots int
}

func (e rowError) Error() string {
	return fmt.Sprintf("table %d: Row(%d) beyond %d slots", e.table, e.i, e.slots)
}

// Mut returns live slot i's record for writing: it marks the page dirty and
// queues the record for re-hashing. Mut of a slot that is not live is a bug
// of the caller and panics.
//
// A record already written since the hash was last read is queued for
// re-hashing and its page is dirty (a capture reads the hash first, so it
// never clears a page's bit while one of its records is queued): Mut tests
// the record's queued bit and marks both on the first write only.
func (t *Table) Mut(i int) Record {
	if !t.Live(i) {
		panic(mutError{t.id, i})
	}
	w, b := i>>6, uint64(1)<<(uint(i)&63)
	if t.pendBits[w]&b == 0 {
		t.pendBits[w] |= b
		t.pendSum[w>>6] |= 1 << (uint(w) & 63)
		t.pending = true
		pg := i >> (t.pageShift & 63)
		t.dirty[pg>>6] |= 1 << (uint(pg) & 63)
	}
	return t.record(i)
}

// mutError is Mut's panic value.
type mutError struct {
	table uint32
	i     int
}

func (e mutError) Error() string {
	return fmt.Sprintf("table %d: Mut of slot %d which is not live", e.table, e.i)
}

func (t *Table) markDirty(i int) {
	pg := i >> (t.pageShift & 63)
	t.dirty[pg>>6] |= 1 << (uint(pg) & 63)
}

func (t *Table) markPending(i int) {
	w := i >> 6
	t.pendBits[w] |= 1 << (uint(i) & 63)
	t.pendSum[w>>6] |= 1 << (uint(w) & 63)
	t.pending = true
}

// commit re-hashes the records written since the last commit, in slot
// order (the hash is a sum, so the order does not change it). A slot freed
// after its write is skipped: Free already removed its hash.
func (t *Table) commit() {
	t.pending = false
	hash := t.hash
	for sw, sum := range t.pendSum {
		if sum == 0 {
			continue
		}
		t.pendSum[sw] = 0
		for ; sum != 0; sum &= sum - 1 {
			w := sw<<6 | bits.TrailingZeros64(sum)
			word := t.pendBits[w] & t.live[w]
			t.pendBits[w] = 0
			for ; word != 0; word &= word - 1 {
				i := w<<6 | bits.TrailingZeros64(word)
				h := HashBytes(recordSeed(t.id, i), t.record(i))
				hash += h - t.recHash[i]
				t.recHash[i] = h
				if t.ft != nil {
					t.sumRecord(i)
				}
			}
		}
	}
	t.hash = hash
}

// Hash returns the table's state hash: the sum of h(id, slot, bytes) over
// live slots (plus a term for the NextFit cursor). It costs one record hash
// per record written since the last call.
func (t *Table) Hash() uint64 {
	if t.pending {
		t.commit()
	}
	return t.hash
}

// RecomputeHash computes the state hash from scratch, touching every live
// record. Verification and tests compare it with Hash.
func (t *Table) RecomputeHash() uint64 {
	sum := t.cursorHash()
	for i := t.NextLive(0); i >= 0; i = t.NextLive(i + 1) {
		sum += HashBytes(recordSeed(t.id, i), t.record(i))
	}
	return sum
}

// DirtyPages returns the number of pages written since the last capture.
func (t *Table) DirtyPages() int {
	n := 0
	for _, w := range t.dirty {
		n += bits.OnesCount64(w)
	}
	return n
}

// DirtyBytes returns the number of page bytes the next Capture would copy;
// snapshot schedulers use it to adapt their interval to the dirty rate.
func (t *Table) DirtyBytes() int { return t.DirtyPages() * t.PageBytes() }
