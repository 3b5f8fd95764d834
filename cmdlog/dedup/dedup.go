// Package dedup remembers which request ids a log has stored, per client,
// so that a retried append is stored once: the sequencing replicas'
// table (exported in the view record as msg.ClientMark) and replay.MemLog's.
//
// A client's ids are dense from 1, but pipelined requests can arrive out
// of order, so each client has a high-water mark (every id up to it seen)
// and a sorted window of the ids seen above the mark.
package dedup

import (
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Table holds every client's window. Its zero value is not usable; use
// NewTable or FromMarks. It is not safe for concurrent use.
type Table struct {
	clients map[uint64]*window
}

type window struct {
	mark  uint64
	above []uint64 // sorted, all > mark
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

// FromMarks rebuilds a table from exported marks.
func FromMarks(marks []msg.ClientMark) Table {
	t := NewTable()
	for _, m := range marks {
		t.clients[m.Client] = &window{mark: m.Mark, above: slices.Clone(m.Above)}
	}
	return t
}
