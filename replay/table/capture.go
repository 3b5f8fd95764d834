package table

import (
	"errors"
	"fmt"
	"math/bits"
)

// ErrCorrupt is wrapped by errors about captures that are malformed,
// inconsistent with each other or with the table, or whose contents do not
// reproduce the recorded hash.
var ErrCorrupt = errors.New("table: corrupt capture")

// Page is one captured page: its index in the table and a copy of its bytes.
type Page struct {
	Index uint32
	Data  []byte
}

// Capture is a copy of a table's state taken between ticks: all pages (a
// full capture) or only the pages written since the previous capture (a
// delta), plus the allocator state (occupancy bitmap and cursor) and the
// state hash. Free slots' bytes in captured pages are whatever the live
// table held (unspecified, never read). Captures own their bytes: the table can keep running while a
// background writer encodes, compresses and stores them.
type Capture struct {
	TableID        uint32
	RecordSize     uint32
	RecordsPerPage uint32
	// Full is true for a capture of every page; a delta applies on top of
	// the capture numbered Epoch-1.
	Full bool
	// Epoch numbers the table's captures 1, 2, 3, ... (full or delta).
	Epoch uint64
	// Policy is the table's allocation policy.
	Policy Policy
	// Slots is the table's slot count at capture time (a multiple of
	// RecordsPerPage).
	Slots uint32
	// Cursor is the NextFit allocation cursor (0 for LowestFree), in
	// [0, Slots].
	Cursor uint32
	// Live is the occupancy bitmap, ceil(Slots/64) words, bit i%64 of word
	// i/64 set for live slot i.
	Live []uint64
	// Hash is the table's state hash at capture time; Restore checks that
	// the rebuilt table reproduces it.
	Hash uint64
	// Pages are the captured pages in increasing index order.
	Pages []Page

	// buf is the backing array of Pages' data, reused by CaptureInto.
	buf []byte
}

// Capture copies the pages written since the previous capture, clears their
// dirty bits and returns them as a delta with the next epoch. Its cost (the
// pause of the tick loop) is proportional to the dirty bytes.
func (t *Table) Capture() *Capture {
	c := new(Capture)
	t.CaptureInto(c, false)
	return c
}

// CaptureFull copies every page, clears the dirty bits and returns a full
// capture with the next epoch; deltas taken after it apply on top of it.
func (t *Table) CaptureFull() *Capture {
	c := new(Capture)
	t.CaptureInto(c, true)
	return c
}

// CaptureInto is Capture (full=false) or CaptureFull (full=true) into dst,
// reusing dst's buffers, so a snapshot writer that recycles captures makes
// the pause allocation-free. dst must not be in use elsewhere.
func (t *Table) CaptureInto(dst *Capture, full bool) {
	if t.pending {
		t.commit()
	}
	t.epoch++
	n := len(t.pages)
	if !full {
		n = t.DirtyPages()
	}
	pageBytes := t.PageBytes()
	backing := dst.buf
	if cap(backing) < n*pageBytes {
		backing = make([]byte, n*pageBytes)
	}
	backing = backing[:n*pageBytes]
	buf := backing
	pages := dst.Pages[:0]
	if cap(pages) < n {
		pages = make([]Page, 0, n)
	}
	if full {
		for pg := range t.pages {
			data := buf[:pageBytes:pageBytes]
			buf = buf[pageBytes:]
			copy(data, t.pages[pg])
			pages = append(pages, Page{Index: uint32(pg), Data: data})
		}
		clear(t.dirty)
	} else {
		for w, word := range t.dirty {
			for word != 0 {
				pg := w<<6 | bits.TrailingZeros64(word)
				word &= word - 1
				data := buf[:pageBytes:pageBytes]
				buf = buf[pageBytes:]
				copy(data, t.pages[pg])
				pages = append(pages, Page{Index: uint32(pg), Data: data})
			}
			t.dirty[w] = 0
		}
	}
	*dst = Capture{
		TableID:        t.id,
		RecordSize:     uint32(t.recSize),
		RecordsPerPage: uint32(t.perPage),
		Full:           full,
		Epoch:          t.epoch,
		Policy:         t.policy,
		Slots:          uint32(t.slots),
		Cursor:         uint32(t.cursor),
		Live:           append(dst.Live[:0], t.live...),
		Hash:           t.hash,
		Pages:          pages,
		buf:            backing,
	}
}

// Validate checks a capture's internal consistency: sizes within limits,
// slot count a multiple of the page size, bitmap length and no bits beyond
// the slots, page indexes strictly increasing and in range, page lengths,
// and, for a full capture, every page present.
func (c *Capture) Validate() error {
	if c == nil {
		return fmt.Errorf("%w: nil capture", ErrCorrupt)
	}
	rs, per, slots := int(c.RecordSize), int(c.RecordsPerPage), int(c.Slots)
	if rs <= 0 || rs > MaxRecordSize {
		return fmt.Errorf("%w: table %d: record size %d", ErrCorrupt, c.TableID, rs)
	}
	if per <= 0 || per > MaxRecordsPerPage || per&(per-1) != 0 || per*rs > MaxPageBytes {
		return fmt.Errorf("%w: table %d: %d records per page", ErrCorrupt, c.TableID, per)
	}
	if slots < 0 || slots > MaxSlots || slots%per != 0 {
		return fmt.Errorf("%w: table %d: %d slots", ErrCorrupt, c.TableID, slots)
	}
	if c.Policy > NextFit || c.Cursor > c.Slots || (c.Policy == LowestFree && c.Cursor != 0) {
		return fmt.Errorf("%w: table %d: policy %d cursor %d of %d slots", ErrCorrupt, c.TableID, c.Policy, c.Cursor, c.Slots)
	}
	if c.Epoch == 0 {
		return fmt.Errorf("%w: table %d: epoch 0", ErrCorrupt, c.TableID)
	}
	if len(c.Live) != (slots+63)>>6 {
		return fmt.Errorf("%w: table %d: bitmap of %d words for %d slots", ErrCorrupt, c.TableID, len(c.Live), slots)
	}
	if r := slots & 63; r != 0 && c.Live[len(c.Live)-1]>>uint(r) != 0 {
		return fmt.Errorf("%w: table %d: live bits beyond slot %d", ErrCorrupt, c.TableID, slots)
	}
	npages := slots / per
	if c.Full && len(c.Pages) != npages {
		return fmt.Errorf("%w: table %d: full capture has %d of %d pages", ErrCorrupt, c.TableID, len(c.Pages), npages)
	}
	pageBytes := per * rs
	for k, p := range c.Pages {
		if int(p.Index) >= npages || (k > 0 && p.Index <= c.Pages[k-1].Index) {
			return fmt.Errorf("%w: table %d: page index %d out of order or beyond %d pages", ErrCorrupt, c.TableID, p.Index, npages)
		}
		if len(p.Data) != pageBytes {
			return fmt.Errorf("%w: table %d: page %d has %d bytes, want %d", ErrCorrupt, c.TableID, p.Index, len(p.Data), pageBytes)
		}
	}
	return nil
}

// checkChain validates full and deltas as a restorable chain for t.
func (t *Table) checkChain(full *Capture, deltas []*Capture) error {
	if err := full.Validate(); err != nil {
		return err
	}
	if !full.Full {
		return fmt.Errorf("%w: table %d: base capture %d is a delta", ErrCorrupt, t.id, full.Epoch)
	}
	prev := full
	for _, d := range deltas {
		if err := d.Validate(); err != nil {
			return err
		}
		if d.Full {
			return fmt.Errorf("%w: table %d: capture %d after the base is full", ErrCorrupt, t.id, d.Epoch)
		}
		if d.Epoch != prev.Epoch+1 {
			return fmt.Errorf("%w: table %d: delta %d does not follow capture %d", ErrCorrupt, t.id, d.Epoch, prev.Epoch)
		}
		if d.Slots < prev.Slots {
			return fmt.Errorf("%w: table %d: delta %d shrinks slots %d→%d", ErrCorrupt, t.id, d.Epoch, prev.Slots, d.Slots)
		}
		prev = d
	}
	for _, c := range append([]*Capture{full}, deltas...) {
		if c.TableID != t.id || int(c.RecordSize) != t.recSize || int(c.RecordsPerPage) != t.perPage || c.Policy != t.policy {
			return fmt.Errorf("%w: capture of table %d (%d-byte records, %d per page, policy %d) for table %d (%d-byte records, %d per page, policy %d)",
				ErrCorrupt, c.TableID, c.RecordSize, c.RecordsPerPage, c.Policy, t.id, t.recSize, t.perPage, t.policy)
		}
	}
	last := prev
	count := 0
	for _, w := range last.Live {
		count += bits.OnesCount64(w)
	}
	if count > t.maxRecs {
		return fmt.Errorf("%w: table %d: %d live records exceed the limit %d", ErrCorrupt, t.id, count, t.maxRecs)
	}
	return nil
}

// rebuild returns a table with t's configuration holding the state of the
// chain, checked: the recomputed hash must equal the last capture's.
func (t *Table) rebuild(full *Capture, deltas []*Capture) (*Table, error) {
	if err := t.checkChain(full, deltas); err != nil {
		return nil, err
	}
	last := full
	if len(deltas) > 0 {
		last = deltas[len(deltas)-1]
	}
	n := &Table{
		id: t.id, recSize: t.recSize, perPage: t.perPage,
		pageShift: t.pageShift, maxRecs: t.maxRecs,
		policy: t.policy, cursor: int(last.Cursor),
	}
	npages := int(last.Slots) / t.perPage
	pageBytes := t.PageBytes()
	backing := make([]byte, npages*pageBytes)
	n.data = backing
	n.pages = make([][]byte, npages)
	for pg := range n.pages {
		n.pages[pg] = backing[pg*pageBytes : (pg+1)*pageBytes : (pg+1)*pageBytes]
	}
	for _, c := range append([]*Capture{full}, deltas...) {
		for _, p := range c.Pages {
			copy(n.pages[p.Index], p.Data)
		}
	}
	n.slots = int(last.Slots)
	n.live = append([]uint64(nil), last.Live...)
	n.pendBits = make([]uint64, len(n.live))
	n.pendSum = make([]uint64, (len(n.live)+63)>>6)
	n.dirty = make([]uint64, (npages+63)>>6)
	n.recHash = make([]uint64, n.slots)
	n.hash = n.cursorHash()
	for i := n.NextLive(0); i >= 0; i = n.NextLive(i + 1) {
		h := HashBytes(recordSeed(t.id, i), n.record(i))
		n.recHash[i] = h
		n.hash += h
		n.count++
	}
	if n.hash != last.Hash {
		return nil, fmt.Errorf("%w: table %d: restored hash %#x, capture %d recorded %#x", ErrCorrupt, t.id, n.hash, last.Epoch, last.Hash)
	}
	n.lowFree = n.lowestFree()
	n.epoch = last.Epoch
	if t.ft != nil {
		n.ft = &fieldTrack{units: t.ft.units}
		n.recomputeFields()
	}
	return n, nil
}

// Restore replaces the table's state with the one captured by full followed
// by deltas (consecutive epochs). Everything is checked before the table
// changes: on error the table is left as it was. After Restore nothing is
// dirty and the next capture continues the chain.
func (t *Table) Restore(full *Capture, deltas ...*Capture) error {
	n, err := t.rebuild(full, deltas)
	if err != nil {
		return err
	}
	*t = *n
	return nil
}
