package table

import "fmt"

// Set is the fixed collection of tables holding one simulation shard's
// whole mutable state. Its hash is the sum of its tables' hashes (record
// hashes are bound to their table id, so tables cannot cancel each other),
// and it captures and restores all its tables together.
type Set struct {
	tables []*Table
}

// NewSet returns a set of the given tables, which must have distinct ids.
func NewSet(tables ...*Table) (*Set, error) {
	if len(tables) > MaxSetTables {
		return nil, fmt.Errorf("table set: %d tables exceed %d", len(tables), MaxSetTables)
	}
	for i, t := range tables {
		if t == nil {
			return nil, fmt.Errorf("table set: table %d is nil", i)
		}
		for _, u := range tables[:i] {
			if u.id == t.id {
				return nil, fmt.Errorf("table set: id %d used twice", t.id)
			}
		}
	}
	return &Set{tables: append([]*Table(nil), tables...)}, nil
}

// Tables returns the set's tables in order. The slice must not be modified.
func (s *Set) Tables() []*Table { return s.tables }

// Hash returns the state hash of all tables; like Table.Hash it costs one
// record hash per record written since the last call.
func (s *Set) Hash() uint64 {
	var h uint64
	for _, t := range s.tables {
		h += t.Hash()
	}
	return h
}

// RecomputeHash computes the state hash from scratch.
func (s *Set) RecomputeHash() uint64 {
	var h uint64
	for _, t := range s.tables {
		h += t.RecomputeHash()
	}
	return h
}

// DirtyBytes returns the bytes the next Capture would copy.
func (s *Set) DirtyBytes() int {
	n := 0
	for _, t := range s.tables {
		n += t.DirtyBytes()
	}
	return n
}

// Capture captures the pages of every table written since the previous
// capture (see Table.Capture).
func (s *Set) Capture() *SetCapture { return s.capture(false) }

// CaptureFull captures every page of every table (see Table.CaptureFull).
func (s *Set) CaptureFull() *SetCapture { return s.capture(true) }

func (s *Set) capture(full bool) *SetCapture {
	c := &SetCapture{Full: full, Tables: make([]*Capture, len(s.tables))}
	for i, t := range s.tables {
		c.Tables[i] = new(Capture)
		t.CaptureInto(c.Tables[i], full)
		c.Hash += c.Tables[i].Hash
	}
	return c
}

// CaptureInto captures into dst, reusing its buffers (see
// Table.CaptureInto).
func (s *Set) CaptureInto(dst *SetCapture, full bool) {
	if len(dst.Tables) != len(s.tables) {
		dst.Tables = make([]*Capture, len(s.tables))
	}
	dst.Full, dst.Hash = full, 0
	for i, t := range s.tables {
		if dst.Tables[i] == nil {
			dst.Tables[i] = new(Capture)
		}
		t.CaptureInto(dst.Tables[i], full)
		dst.Hash += dst.Tables[i].Hash
	}
}

// Restore replaces every table's state with the one captured by full
// followed by deltas. Each capture must hold exactly the set's tables. All
// tables are rebuilt and checked before any changes: on error the set is
// left as it was.
func (s *Set) Restore(full *SetCapture, deltas ...*SetCapture) error {
	rebuilt := make([]*Table, len(s.tables))
	for i, t := range s.tables {
		base, err := s.pick(full, t.id)
		if err != nil {
			return err
		}
		chain := make([]*Capture, len(deltas))
		for k, d := range deltas {
			if chain[k], err = s.pick(d, t.id); err != nil {
				return err
			}
		}
		if rebuilt[i], err = t.rebuild(base, chain); err != nil {
			return err
		}
	}
	for i, t := range s.tables {
		*t = *rebuilt[i]
	}
	return nil
}

// pick returns c's capture of table id, checking that c covers exactly the
// set's tables.
func (s *Set) pick(c *SetCapture, id uint32) (*Capture, error) {
	if c == nil || len(c.Tables) != len(s.tables) {
		return nil, fmt.Errorf("%w: set capture does not hold the set's %d tables", ErrCorrupt, len(s.tables))
	}
	for _, tc := range c.Tables {
		if tc != nil && tc.TableID == id {
			return tc, nil
		}
	}
	return nil, fmt.Errorf("%w: set capture lacks table %d", ErrCorrupt, id)
}
