package seq

import (
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// dedupTable remembers, per client, which request ids a replica has seen
// (held in its unordered log or already ordered). A client's ids are dense
// from 1, but pipelined requests can arrive out of order, so each client has
// a high-water mark (every id <= mark seen) and a sorted window of ids seen
// above the mark.
type dedupTable struct {
	clients map[uint64]*clientWindow
}

type clientWindow struct {
	mark  uint64
	above []uint64 // sorted, all > mark
}

func newDedupTable() dedupTable { return dedupTable{clients: make(map[uint64]*clientWindow)} }

// seen reports whether id was recorded.
func (d *dedupTable) seen(id msg.RecordID) bool {
	w := d.clients[id.Client]
	if w == nil {
		return false
	}
	if id.Seq <= w.mark {
		return true
	}
	_, found := slices.BinarySearch(w.above, id.Seq)
	return found
}

// add records id; it reports false if id was already recorded.
func (d *dedupTable) add(id msg.RecordID) bool {
	w := d.clients[id.Client]
	if w == nil {
		w = &clientWindow{}
		d.clients[id.Client] = w
	}
	if id.Seq <= w.mark {
		return false
	}
	i, found := slices.BinarySearch(w.above, id.Seq)
	if found {
		return false
	}
	if id.Seq == w.mark+1 {
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
	w.above = slices.Insert(w.above, i, id.Seq)
	return true
}

// marks exports the table in client order (deterministic).
func (d *dedupTable) marks() []msg.ClientMark {
	ids := make([]uint64, 0, len(d.clients))
	for c := range d.clients {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	out := make([]msg.ClientMark, 0, len(ids))
	for _, c := range ids {
		w := d.clients[c]
		out = append(out, msg.ClientMark{Client: c, Mark: w.mark, Above: slices.Clone(w.above)})
	}
	return out
}

// dedupFromMarks rebuilds a table from exported marks.
func dedupFromMarks(marks []msg.ClientMark) dedupTable {
	d := newDedupTable()
	for _, m := range marks {
		d.clients[m.Client] = &clientWindow{mark: m.Mark, above: slices.Clone(m.Above)}
	}
	return d
}
