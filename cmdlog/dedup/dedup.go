// Package dedup remembers which request ids a log has stored, per client,
// so that a retried append is stored once: the sequencing replicas'
// table (exported in the view record as msg.ClientMark) and replay.MemLog's.
//
// A client's ids are dense from 1, but pipelined requests can arrive out
// of order, so each client has a high-water mark (every id up to it seen)
// and a sorted window of the ids seen above the mark.
//
// # Leases
//
// The replicas' table must stay bounded in bytes (the view record carries
// it), and must never forget a client that may still retry: forgetting
// one lets its retry be stored twice. So marks expire by a lease counted
// in views, which every Append names:
//
//   - each mark carries View, the last view in which the client stored a
//     record (or raised its floor); a view change to view N exports only
//     the marks whose lease is live, View + L > N (Live), L =
//     DefaultLeaseViews;
//   - a client sends an append only in views below the first view it sent
//     it in plus L, and then reports its outcome as unknown (stored at
//     most once, maybe not at all) and never sends it again, so a retry
//     always finds its marks;
//   - a replica admits at most MaxClients clients a view (Admit) and only
//     ids less than Window above a client's mark (InWindow), so the marks
//     a view record carries stay under MaxExportBytes (Fit);
//   - a client's floor (Raise) closes the gaps abandoned appends leave:
//     every id below it is complete or abandoned, so the mark moves up to
//     it and the window above it keeps moving.
package dedup

import (
	"encoding/binary"
	"fmt"
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
	view  uint64   // lease: the last view the client stored (or raised) in
}

// NewTable returns an empty table.
func NewTable() Table { return Table{clients: make(map[uint64]*window)} }

// Add records id; it reports false if id was already recorded.
func (t *Table) Add(id msg.RecordID) bool { return t.AddIn(id, 0) }

// AddIn records id, stored in view (the client's lease is renewed to at
// least view); it reports false if id was already recorded.
func (t *Table) AddIn(id msg.RecordID, view uint64) bool {
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
	// Only a stored id renews the lease (what a replica's write-ahead log
	// replays gives the same table).
	w.view = max(w.view, view)
	if id.Seq != w.mark+1 {
		w.above = slices.Insert(w.above, i, id.Seq)
		return true
	}
	w.mark++
	w.absorb()
	return true
}

// absorb moves the mark over the run of ids above it now contiguous with
// it.
func (w *window) absorb() {
	n := 0
	for n < len(w.above) && w.above[n] == w.mark+1 {
		w.mark++
		n++
	}
	if n > 0 {
		w.above = append(w.above[:0], w.above[n:]...)
	}
}

// Raise applies client's floor, stored in view: every id of client below
// floor is complete or abandoned, so the mark moves up to floor-1 (ids
// below it are then answered as recorded, and never stored). If it
// moves the mark, it creates the client's entry if it has none and renews
// its lease; it reports whether the mark moved.
func (t *Table) Raise(client, floor, view uint64) bool {
	w := t.clients[client]
	var mark uint64
	if w != nil {
		mark = w.mark
	}
	if floor == 0 || floor-1 <= mark {
		return false
	}
	if w == nil {
		w = &window{}
		t.clients[client] = w
		t.clock++
		w.last = t.clock
	}
	w.view = max(w.view, view)
	w.mark = floor - 1
	i, found := slices.BinarySearch(w.above, w.mark)
	if found {
		i++
	}
	w.above = append(w.above[:0], w.above[i:]...)
	w.absorb()
	return true
}

// Known reports whether the table has an entry for client.
func (t *Table) Known(client uint64) bool { return t.clients[client] != nil }

// Len returns the number of clients in the table.
func (t *Table) Len() int { return len(t.clients) }

// InWindow reports whether id may be recorded under a window of size
// window: it is recorded already, or less than window above its client's
// mark (a client with no entry has mark 0). The ids a client holds above
// its mark then number at most window-2 (mark+1 would be absorbed), each
// less than window above it.
func (t *Table) InWindow(id msg.RecordID, window int) bool {
	w := t.clients[id.Client]
	var mark uint64
	if w != nil {
		mark = w.mark
	}
	return id.Seq <= mark || id.Seq-mark < uint64(window) || t.Has(id)
}

// MostRecent exports, in client order, the marks of the n most recently
// active clients: what the replicas kept before leases, unsafe (a client
// quiet while n others appended is forgotten, and its retry stored
// again); kept only for the simulator's injected bug.
func (t *Table) MostRecent(n int) []msg.ClientMark {
	ids := make([]uint64, 0, len(t.clients))
	for c := range t.clients {
		ids = append(ids, c)
	}
	slices.SortFunc(ids, func(a, b uint64) int {
		if t.clients[a].last != t.clients[b].last {
			if t.clients[a].last > t.clients[b].last {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	ids = ids[:min(n, len(ids))]
	slices.Sort(ids)
	out := make([]msg.ClientMark, 0, len(ids))
	for _, c := range ids {
		w := t.clients[c]
		out = append(out, msg.ClientMark{Client: c, Mark: w.mark, Above: slices.Clone(w.above), View: w.view})
	}
	return out
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
	return t.export(func(*window) bool { return true })
}

// Live exports, in client order, the marks whose lease is live in view
// next: View + lease > next. The others expire at the change to next:
// their clients send nothing in next that they did not complete or
// abandon before.
func (t *Table) Live(next, lease uint64) []msg.ClientMark {
	return t.export(func(w *window) bool {
		return next < lease || w.view > next-lease // View + lease > next, without overflow
	})
}

// export returns the marks of the clients keep selects, in client order.
func (t *Table) export(keep func(*window) bool) []msg.ClientMark {
	ids := make([]uint64, 0, len(t.clients))
	for c, w := range t.clients {
		if keep(w) {
			ids = append(ids, c)
		}
	}
	slices.Sort(ids)
	out := make([]msg.ClientMark, 0, len(ids))
	for _, c := range ids {
		w := t.clients[c]
		out = append(out, msg.ClientMark{Client: c, Mark: w.mark, Above: slices.Clone(w.above), View: w.view})
	}
	return out
}

// FromMarks rebuilds a table from exported marks. A mark later in marks
// counts as more recent (Bounded exports the oldest first).
func FromMarks(marks []msg.ClientMark) Table {
	t := NewTable()
	for _, m := range marks {
		t.clock++
		t.clients[m.Client] = &window{mark: m.Mark, above: slices.Clone(m.Above), last: t.clock, view: m.View}
	}
	return t
}

// Defaults of the replicas' leases and budgets (seq.Config), and the
// bounds Fit enforces on what a view record carries.
const (
	// DefaultLeaseViews is L: a mark stored in view V is kept through
	// the change to view V+L-1 and expires at the change to V+L. A
	// client and the replicas must use the same value.
	DefaultLeaseViews = 8
	// DefaultMaxClients caps the clients a replica admits: a full table
	// refuses a new client busy (nothing stored). A view record then
	// carries at most twice as many marks (a follower also admits the
	// clients the leader ordered).
	DefaultMaxClients = 4096
	// DefaultWindow caps how far above its mark a client's ids may be:
	// a mark carries at most DefaultWindow-2 ids above it.
	DefaultWindow = 16
	// MaxExportClients and MaxExportBytes bound the marks a view
	// record carries: it must stay decodable (cmdlog/codec takes lists
	// of at most 65,536 items) and well under NATS's 1 MiB payload
	// limit. 2 x DefaultMaxClients marks of DefaultWindow-2 ids above
	// take at most 2 x 4,096 x 45 bytes (360 KiB) in the coordinator's
	// encoding (TestWorstCaseFitsTheViewRecord).
	MaxExportClients = 1 << 14
	MaxExportBytes   = 512 << 10
)

// MaxMarkBytes is the largest EncodedSize of a mark under a window of
// size window: three uvarints of up to 10 bytes, a count, and window-2
// deltas each under window (a byte each up to a window of 64, else 2).
func MaxMarkBytes(window int) int {
	per := 1
	if window > 64 {
		per = uvarintLen(uint64(window) << 1)
	}
	return 3*binary.MaxVarintLen64 + uvarintLen(uint64(window)) + max(window-2, 0)*per
}

// EncodedSize is the size of m in the coordinator's encoding
// (coord.EncodeViewRecord): its uvarints, and a zigzag delta per id
// above the mark.
func EncodedSize(m msg.ClientMark) int {
	n := uvarintLen(m.Client) + uvarintLen(m.Mark) + uvarintLen(uint64(len(m.Above))) + uvarintLen(m.View)
	prev := m.Mark
	for _, a := range m.Above {
		d := int64(a - prev)
		n += uvarintLen(uint64(d<<1) ^ uint64(d>>63))
		prev = a
	}
	return n
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// Fit reports whether marks fit a view record: at most MaxExportClients
// of them, at most MaxExportBytes encoded. A flusher checks what it exports (with the admission and
// window rules it always fits), and a replica checks every view record it
// reads.
func Fit(marks []msg.ClientMark) error {
	if len(marks) > MaxExportClients {
		return fmt.Errorf("dedup: %d marks, over %d", len(marks), MaxExportClients)
	}
	size := 0
	for _, m := range marks {
		size += EncodedSize(m)
	}
	if size > MaxExportBytes {
		return fmt.Errorf("dedup: marks encode to %d bytes, over %d", size, MaxExportBytes)
	}
	return nil
}
