package dst

import (
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// memStore is the simulator's shard storage: what Apply returned from
// survives a crash of the shard (the slot keeps the store, the core is
// rebuilt). Positions are dense, so scans look positions up one by one.
type memStore struct {
	entries map[uint64]msg.Entry
	meta    shard.Meta
	// durableMeta is the meta a crash keeps: lazy writes (stable-gp
	// announcements) are lost unless a durable write followed them.
	durableMeta shard.Meta
	// onPut is called before each write, to check it against what
	// clients have read.
	check func(pos uint64, old msg.Entry, had bool, nw *msg.Entry)
}

func newMemStore() *memStore { return &memStore{entries: make(map[uint64]msg.Entry)} }

func (s *memStore) Get(pos uint64) (msg.Entry, bool, error) {
	e, ok := s.entries[pos]
	return e, ok, nil
}

func (s *memStore) Scan(from, to uint64, fn func(msg.Entry) bool) error {
	for p := from; p <= to && p >= from; p++ {
		if e, ok := s.entries[p]; ok {
			if !fn(e) {
				return nil
			}
		}
	}
	return nil
}

func (s *memStore) Meta() (shard.Meta, error) { return s.meta, nil }

// maxPos returns the highest stored position.
func (s *memStore) maxPos() uint64 {
	var m uint64
	for p := range s.entries {
		m = max(m, p)
	}
	return m
}

func (s *memStore) Apply(w shard.Writes) error {
	for _, e := range w.Puts {
		old, had := s.entries[e.Pos]
		if s.check != nil {
			s.check(e.Pos, old, had, &e)
		}
		s.entries[e.Pos] = e
	}
	if w.HasDeleteAbove {
		top := s.maxPos()
		for p := w.DeleteAbove + 1; p <= top && p > w.DeleteAbove; p++ {
			if old, ok := s.entries[p]; ok {
				if s.check != nil {
					s.check(p, old, true, nil)
				}
				delete(s.entries, p)
			}
		}
	}
	if w.TrimTo > 0 {
		for p := range s.entries {
			if p <= w.TrimTo {
				delete(s.entries, p)
			}
		}
	}
	if w.Meta != nil {
		s.meta = *w.Meta
	}
	s.durableMeta = s.meta
	return nil
}

// applyLazy applies meta-only lazy writes, which a crash loses.
func (s *memStore) applyLazy(ws []shard.Writes) {
	for _, w := range ws {
		if len(w.Puts) > 0 || w.HasDeleteAbove || w.TrimTo > 0 {
			panic("dst: lazy shard writes change entries")
		}
		if w.Meta != nil {
			s.meta = *w.Meta
		}
	}
}

// crash forgets what was not durable.
func (s *memStore) crash() { s.meta = s.durableMeta }
