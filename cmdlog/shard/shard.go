// Package shard is a cmdlog shard as a pure state machine: it stores the
// positioned records the sequencing leader (or a view-change flusher)
// writes to it, serves reads up to stable-gp, parks reads above it, and
// trims prefixes. Storage is behind the Storage interface; the core reads it
// synchronously and returns writes in Ready for the driver to make durable
// before the acknowledgements are sent.
package shard

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Config parameterises a Shard.
type Config struct {
	ID     msg.NodeID
	Layout msg.Layout
	// MaxReadEntries caps entries returned by one read.
	MaxReadEntries int
	// MaxParkedReads caps reads waiting for stable-gp; beyond it the oldest
	// is answered with what is stable (possibly nothing: the client retries).
	MaxParkedReads int
	// Replicas are the cluster's sequencing replicas, the only writers: a
	// Store or StableGP from any other id is refused. Empty means every id
	// below the lowest shard (replicas 1, 2, ..., shards from 101).
	Replicas []msg.NodeID
}

// maxReadBytes caps the record bytes of one read response, well inside the
// codec's message size limit.
const maxReadBytes = 4 << 20

// Ready is the work a Shard asks of its driver: apply Writes (in order,
// durably), then send Messages.
type Ready struct {
	Writes   []Writes
	Messages []msg.Envelope
}

// Shard is one log shard.
type Shard struct {
	cfg        Config
	store      Storage
	meta       Meta
	index      int // our index in Layout.Shards
	parked     []parkedRead
	ready      Ready
	violations []string
	err        error
	// applied remembers the most recent (epoch, batch) Stores applied, in
	// insertion order in appliedRing.
	applied     map[[2]uint64]struct{}
	appliedRing [][2]uint64
	appliedNext int
	// refused counts messages from senders not allowed to send them.
	refused uint64
}

// appliedMemory is how many recent Stores a shard remembers.
const appliedMemory = 1024

func (s *Shard) noteApplied(key [2]uint64) {
	if s.err != nil {
		return
	}
	if s.applied == nil {
		s.applied = make(map[[2]uint64]struct{}, appliedMemory)
		s.appliedRing = make([][2]uint64, appliedMemory)
	}
	if old := s.appliedRing[s.appliedNext]; old != ([2]uint64{}) {
		delete(s.applied, old)
	}
	s.appliedRing[s.appliedNext] = key
	s.appliedNext = (s.appliedNext + 1) % appliedMemory
	s.applied[key] = struct{}{}
}

type parkedRead struct {
	from msg.NodeID
	req  msg.Read
}

// New returns a shard over store, resuming from its persisted Meta.
func New(cfg Config, store Storage) (*Shard, error) {
	if cfg.MaxReadEntries <= 0 {
		cfg.MaxReadEntries = 1024
	}
	cfg.MaxReadEntries = min(cfg.MaxReadEntries, 8192)
	if cfg.MaxParkedReads <= 0 {
		cfg.MaxParkedReads = 4096
	}
	idx := -1
	for i, s := range cfg.Layout.Shards {
		if s == cfg.ID {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("shard %d: not in layout %v", cfg.ID, cfg.Layout.Shards)
	}
	meta, err := store.Meta()
	if err != nil {
		return nil, fmt.Errorf("shard %d: read meta: %w", cfg.ID, err)
	}
	return &Shard{cfg: cfg, store: store, meta: meta, index: idx}, nil
}

// Meta returns the shard's current epoch, stable-gp and trimmed prefix.
func (s *Shard) Meta() Meta { return s.meta }

// Violations returns (and clears) protocol invariants the shard saw broken,
// such as an attempt to overwrite a stable position. A correct protocol
// never produces any.
func (s *Shard) Violations() []string {
	v := s.violations
	s.violations = nil
	return v
}

// Err returns the first storage error the shard hit; the driver should
// stop the shard (it cannot serve correctly).
func (s *Shard) Err() error { return s.err }

// Ready returns the accumulated work and resets it.
func (s *Shard) Ready() Ready {
	rd := s.ready
	s.ready = Ready{}
	return rd
}

func (s *Shard) send(to msg.NodeID, m msg.Message) {
	s.ready.Messages = append(s.ready.Messages, msg.Envelope{From: s.cfg.ID, To: to, Msg: m})
}

func (s *Shard) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf("shard %d: ", s.cfg.ID)+fmt.Sprintf(format, args...))
}

func (s *Shard) fail(err error) {
	if s.err == nil {
		s.err = fmt.Errorf("shard %d: %w", s.cfg.ID, err)
	}
}

// Step processes one incoming message.
func (s *Shard) Step(env msg.Envelope) {
	if s.err != nil {
		return
	}
	if !s.allowed(env) {
		s.refused++
		return
	}
	switch m := env.Msg.(type) {
	case msg.Store:
		s.onStore(env.From, m)
	case msg.StableGP:
		s.onStable(m)
	case msg.Read:
		s.onRead(env.From, m)
	case msg.Trim:
		s.onTrim(env.From, m)
	}
}

// isReplica reports whether id is a configured sequencing replica.
func (s *Shard) isReplica(id msg.NodeID) bool {
	if len(s.cfg.Replicas) > 0 {
		return slices.Contains(s.cfg.Replicas, id)
	}
	return id >= 1 && id < slices.Min(s.cfg.Layout.Shards)
}

// allowed reports whether env may come from env.From (DESIGN.md §10; the
// mesh proves env.From). Writes (Store, StableGP) come only from the
// sequencing replicas: the shard does not know the view, and the epoch
// fences a replica of an older one. Reads come from anyone; trims from
// clients and replicas, never from a shard or the coordinator's address.
func (s *Shard) allowed(env msg.Envelope) bool {
	switch env.Msg.(type) {
	case msg.Store, msg.StableGP:
		return s.isReplica(env.From)
	case msg.Read:
		return env.From != msg.Coordinator
	case msg.Trim:
		return env.From != msg.Coordinator && !slices.Contains(s.cfg.Layout.Shards, env.From)
	}
	return false
}

// Refused returns how many messages the shard refused so far, from a
// sender not allowed to send them.
func (s *Shard) Refused() uint64 { return s.refused }

func (s *Shard) owns(pos uint64) bool {
	return pos >= 1 && s.cfg.Layout.ShardIndex(pos) == s.index
}

func (s *Shard) onStore(from msg.NodeID, m msg.Store) {
	if m.Epoch < s.meta.Epoch {
		s.send(from, msg.StoreReject{Epoch: s.meta.Epoch, Batch: m.Batch})
		return
	}
	// A retransmission of a batch this shard already applied (an epoch's
	// writer numbers its batches uniquely) is acknowledged without
	// writing it again.
	key := [2]uint64{m.Epoch, m.Batch}
	if _, done := s.applied[key]; done {
		s.send(from, msg.StoreAck{Epoch: m.Epoch, Batch: m.Batch})
		return
	}
	defer s.noteApplied(key)
	var w Writes
	for _, e := range m.Entries {
		if !s.owns(e.Pos) {
			s.violate("store of position %d not owned by this shard", e.Pos)
			continue
		}
		if e.Pos <= s.meta.StableGP {
			// Stable positions never change: only an identical rewrite (a
			// retransmission) is acceptable.
			if e.Pos <= s.meta.Trimmed {
				continue
			}
			old, ok, err := s.store.Get(e.Pos)
			if err != nil {
				s.fail(err)
				return
			}
			if !ok || old.Record.ID != e.Record.ID || !bytes.Equal(old.Record.Data, e.Record.Data) {
				s.violate("epoch %d overwrites stable position %d (stable-gp %d): had %v present=%v, got %v",
					m.Epoch, e.Pos, s.meta.StableGP, old.Record.ID, ok, e.Record.ID)
			}
			continue
		}
		w.Puts = append(w.Puts, e)
	}
	if m.Truncate {
		if m.TruncateAbove < s.meta.StableGP {
			s.violate("epoch %d truncates above %d, below stable-gp %d", m.Epoch, m.TruncateAbove, s.meta.StableGP)
		} else {
			w.HasDeleteAbove = true
			w.DeleteAbove = m.TruncateAbove
		}
	}
	if m.Epoch > s.meta.Epoch {
		s.meta.Epoch = m.Epoch
		meta := s.meta
		w.Meta = &meta
	}
	if !w.Empty() {
		s.ready.Writes = append(s.ready.Writes, w)
	}
	s.send(from, msg.StoreAck{Epoch: m.Epoch, Batch: m.Batch})
}

func (s *Shard) onStable(m msg.StableGP) {
	if m.Epoch < s.meta.Epoch || m.GP <= s.meta.StableGP {
		return
	}
	s.meta.StableGP = m.GP
	// A raised epoch fences older writers and must be durable; a higher
	// stable-gp alone need not be (nothing acknowledges it).
	lazy := m.Epoch == s.meta.Epoch
	s.meta.Epoch = m.Epoch
	meta := s.meta
	s.ready.Writes = append(s.ready.Writes, Writes{Meta: &meta, Lazy: lazy})
	kept := s.parked[:0]
	for _, p := range s.parked {
		if p.req.From <= s.meta.StableGP {
			s.answerRead(p.from, p.req)
		} else {
			kept = append(kept, p)
		}
	}
	clear(s.parked[len(kept):])
	s.parked = kept
}

func (s *Shard) onRead(from msg.NodeID, m msg.Read) {
	switch {
	case !s.owns(m.From):
		s.send(from, msg.ReadResp{ReqID: m.ReqID, Err: msg.ReadNotOwner, StableGP: s.meta.StableGP, Trimmed: s.meta.Trimmed})
	case m.From <= s.meta.Trimmed:
		s.send(from, msg.ReadResp{ReqID: m.ReqID, Err: msg.ReadTrimmed, StableGP: s.meta.StableGP, Trimmed: s.meta.Trimmed})
	case m.From > s.meta.StableGP:
		// Slow path: wait until stable-gp passes From.
		if len(s.parked) >= s.cfg.MaxParkedReads {
			old := s.parked[0]
			s.parked = s.parked[1:]
			s.send(old.from, msg.ReadResp{ReqID: old.req.ReqID, StableGP: s.meta.StableGP, Trimmed: s.meta.Trimmed})
		}
		s.parked = append(s.parked, parkedRead{from: from, req: m})
	default:
		s.answerRead(from, m)
	}
}

func (s *Shard) answerRead(from msg.NodeID, m msg.Read) {
	limit := uint64(s.cfg.MaxReadEntries)
	if m.Max > 0 && uint64(m.Max) < limit {
		limit = uint64(m.Max)
	}
	to := min(s.cfg.Layout.StripeEnd(m.From), s.meta.StableGP, m.From+limit-1)
	resp := msg.ReadResp{ReqID: m.ReqID, StableGP: s.meta.StableGP, Trimmed: s.meta.Trimmed}
	next := m.From
	bytes, capped := 0, false
	err := s.store.Scan(m.From, to, func(e msg.Entry) bool {
		if e.Pos != next {
			return false
		}
		if len(resp.Entries) > 0 && bytes+len(e.Record.Data) > maxReadBytes {
			capped = true
			return false
		}
		bytes += len(e.Record.Data) + 32
		resp.Entries = append(resp.Entries, e)
		next++
		return true
	})
	if capped {
		to = next - 1
	}
	if err != nil {
		s.fail(err)
		return
	}
	if next <= to {
		s.violate("stable position %d missing (stable-gp %d)", next, s.meta.StableGP)
	}
	s.send(from, resp)
}

func (s *Shard) onTrim(from msg.NodeID, m msg.Trim) {
	upTo := min(m.UpTo, s.meta.StableGP)
	if upTo > s.meta.Trimmed {
		s.meta.Trimmed = upTo
		meta := s.meta
		s.ready.Writes = append(s.ready.Writes, Writes{TrimTo: upTo, Meta: &meta})
	}
	s.send(from, msg.TrimAck{ReqID: m.ReqID, TrimmedTo: s.meta.Trimmed})
}
