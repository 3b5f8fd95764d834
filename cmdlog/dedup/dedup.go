// Package dedup remembers which request ids a log has stored, per client,
// so that a retried append is stored once: the sequencing replicas'
// table (exported in the view record as msg.ClientMark) and replay.MemLog's.
//
// A client's ids are dense from 1, but pipelined requests can arrive out
// of order, so each client has a high-water mark (every id up to it seen)
// and a sorted window of the ids seen above the mark.
package dedup

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Table holds every client's window. Its zero value is not usable; use
// NewTable or FromMarks. It is not safe for concurrent use.
type Table struct {
	clients map[uint64]*window
	// clock counts Adds: a client's last is the clock of its latest one.
	clock uint64
}

type window struct {
	mark  uint64
	above []uint64 // sorted, all > mark
	last  uint64   // recency: Table.clock at the client's latest Add
}

// NewTable returns an empty table.
func NewTable() Table { return Table{clients: make(map[uint64]*window)} }

// Add records id; it reports false if id was already recorded.
func (t *Table) Add(id msg.RecordID) bool {
	w := t.clients[id.Client]
	if w == nil {
		w = &window{}
		t.clients[id.Client] = w
	}
	t.clock++
	w.last = t.clock
	if id.Seq <= w.mark {
		return false
	}
	i, found := slices.BinarySearch(w.above, id.Seq)
	if found {
		return false
	}
	if id.Seq != w.mark+1 {
		w.above = slices.Insert(w.above, i, id.Seq)
		return true
	}
	w.mark++
	// Absorb the run of ids now contiguous with the mark.
	n := 0
	for n < len(w.above) && w.above[n] == w.mark+1 {
		w.mark++
		n++
	}
	if n > 0 {
		w.above = append(w.above[:0], w.above[n:]...)
	}
	return true
}

// Has reports whether id was recorded.
func (t *Table) Has(id msg.RecordID) bool {
	w := t.clients[id.Client]
	if w == nil {
		return false
	}
	if id.Seq <= w.mark {
		return true
	}
	_, found := slices.BinarySearch(w.above, id.Seq)
	return found
}

// Marks exports the table in client order (deterministic).
func (t *Table) Marks() []msg.ClientMark {
	ids := make([]uint64, 0, len(t.clients))
	for c := range t.clients {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	out := make([]msg.ClientMark, 0, len(ids))
	for _, c := range ids {
		w := t.clients[c]
		out = append(out, msg.ClientMark{Client: c, Mark: w.mark, Above: slices.Clone(w.above)})
	}
	return out
}

// FromMarks rebuilds a table from exported marks. A mark later in marks
// counts as more recent (Bounded exports the oldest first).
func FromMarks(marks []msg.ClientMark) Table {
	t := NewTable()
	for _, m := range marks {
		t.clock++
		t.clients[m.Client] = &window{mark: m.Mark, above: slices.Clone(m.Above), last: t.clock}
	}
	return t
}

// MaxExportClients and MaxExportBytes bound what Bounded exports: the
// view record carries the marks, and must stay decodable (cmdlog/codec
// takes lists of at most 65,536 items) and well under NATS's 1 MiB
// payload limit.
const (
	MaxExportClients = 1 << 14
	MaxExportBytes   = 512 << 10
)

// MarkSize is the encoded size a mark costs in a view record, at most
// (its three uvarints, and a zigzag varint per id above the mark).
func MarkSize(m msg.ClientMark) int {
	return 3*binary.MaxVarintLen64 + len(m.Above)*binary.MaxVarintLen64
}

// Bounded exports the marks of the most recently active clients that fit
// in maxClients marks and maxBytes (MarkSize), oldest first: a client
// quiet while more than that many others appended expires, and forgets
// what it stored (its lease is the table's budget). The table keeps
// its own state (a view change that fails exports again). A client
// whose own mark is too big keeps its mark and the lowest ids above it
// that fit.
func (t *Table) Bounded(maxClients, maxBytes int) []msg.ClientMark {
	ids := make([]uint64, 0, len(t.clients))
	for c := range t.clients {
		ids = append(ids, c)
	}
	// Newest first; ties (none, as the clock is unique) by client id.
	slices.SortFunc(ids, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(t.clients[b].last, t.clients[a].last), cmp.Compare(a, b))
	})
	var out []msg.ClientMark
	size := 0
	for _, c := range ids {
		w := t.clients[c]
		m := msg.ClientMark{Client: c, Mark: w.mark, Above: slices.Clone(w.above)}
		if len(out) >= maxClients || size+MarkSize(m) > maxBytes {
			if len(out) > 0 {
				break
			}
			keep := max(0, (maxBytes-MarkSize(msg.ClientMark{}))/binary.MaxVarintLen64)
			m.Above = m.Above[:min(len(m.Above), keep)]
		}
		size += MarkSize(m)
		out = append(out, m)
	}
	slices.Reverse(out)
	return out
}
