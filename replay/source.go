package replay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
)

// ErrEndOfLog is returned by a Source that has no more entries and never
// will (a recording's end). A Runner treats it as the end of a replay.
var ErrEndOfLog = errors.New("replay: end of log")

// Source delivers log entries in position order. *cmdlog.Subscription is
// one (live play and recovery); SliceSource (a recording) and
// MemLog.Subscribe are others.
type Source interface {
	// Next returns the next entry, waiting until there is one. It returns
	// ErrEndOfLog at the end of a finite log.
	Next(ctx context.Context) (msg.Entry, error)
}

// Appender appends records with caller-chosen ids, exactly once per id
// (*cmdlog.Client and *MemLog are ones). The Runner appends its sim's
// outputs through it and the Ticker its tick markers.
type Appender interface {
	AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error
}

// TickLog is what a Ticker needs of the log (*cmdlog.Client and *MemLog):
// appending with ids, the tail and reads to find the last tick marker.
type TickLog interface {
	Appender
	CheckTail(ctx context.Context) (uint64, error)
	Read(ctx context.Context, from uint64, max int) ([]msg.Entry, error)
}

// SliceSource is a Source over a recorded slice of entries (in position
// order), for offline replay and tests.
type SliceSource struct {
	entries []msg.Entry
	next    int
}

// NewSliceSource returns a source delivering the entries with a position
// of at least from.
func NewSliceSource(entries []msg.Entry, from uint64) *SliceSource {
	s := &SliceSource{entries: entries}
	for s.next < len(entries) && entries[s.next].Pos < from {
		s.next++
	}
	return s
}

// Next implements Source; it returns ErrEndOfLog after the last entry.
func (s *SliceSource) Next(ctx context.Context) (msg.Entry, error) {
	if err := ctx.Err(); err != nil {
		return msg.Entry{}, err
	}
	if s.next >= len(s.entries) {
		return msg.Entry{}, ErrEndOfLog
	}
	e := s.entries[s.next]
	s.next++
	return e, nil
}

// VerifiedSource is a Source that checks the envelopes of the entries it
// delivers itself (wire.VerifyEnvelope), once for every runner reading the
// same entries: LastVerified reports that the entry Next returned last
// passed. (A Runner no longer needs it: its decode verifies in the same
// pass as it reads the fields, wire.ParseEnvelope, at less than the
// generated accessors alone cost; a DecodedSource spares even that.)
type VerifiedSource interface {
	Source
	LastVerified() bool
}

// DecodedSource is a Source that decodes the envelopes of the entries it
// delivers once for every runner reading them: LastEnvelope returns the
// entry Next returned last, decoded as a Runner decodes it (ok false if it
// was not, or is malformed: the Runner then decodes it itself). The
// envelope is the source's, valid until the next call of Next, and must
// not be modified (it is returned by pointer: every shard reads every
// entry, and an envelope is 88 bytes).
type DecodedSource interface {
	Source
	LastEnvelope() (*wire.Envelope, bool)
}

// DecodeEnvelope decodes a log record as a Runner does (the payload
// aliases b), verifying it first.
func DecodeEnvelope(b []byte) (wire.Envelope, error) {
	var env wire.Envelope
	err := decodeRecord(b, &env)
	return env, err
}

// VerifiedEntries is a recorded slice of entries (in position order)
// shared by the runners of a world's shards: each envelope is verified
// once, by the first runner to read it, whatever the number of shards.
type VerifiedEntries struct {
	entries []msg.Entry
	// state: 0 not checked yet, 1 valid (envs holds it decoded), 2
	// malformed, 3 being decoded by another runner.
	state []atomic.Uint32
	envs  []wire.Envelope
}

// NewVerifiedEntries returns the entries' shared verification state.
func NewVerifiedEntries(entries []msg.Entry) *VerifiedEntries {
	return &VerifiedEntries{entries: entries, state: make([]atomic.Uint32, len(entries)), envs: make([]wire.Envelope, len(entries))}
}

// Source returns a VerifiedSource delivering the entries with a position
// of at least from, then ErrEndOfLog.
func (v *VerifiedEntries) Source(from uint64) VerifiedSource {
	s := &verifiedSlice{v: v}
	for s.next < len(v.entries) && v.entries[s.next].Pos < from {
		s.next++
	}
	return s
}

type verifiedSlice struct {
	v    *VerifiedEntries
	next int
	last bool
	cur  *wire.Envelope // the last entry decoded, if last: in v.envs, or env
	env  wire.Envelope  // an entry this source decoded for itself
}

func (s *verifiedSlice) Next(ctx context.Context) (msg.Entry, error) {
	if err := ctx.Err(); err != nil {
		return msg.Entry{}, err
	}
	if s.next >= len(s.v.entries) {
		return msg.Entry{}, ErrEndOfLog
	}
	i := s.next
	e := s.v.entries[i]
	st := &s.v.state[i]
	s.next++
	switch st.Load() {
	case 1:
		s.cur, s.last = &s.v.envs[i], true
	case 2:
		s.last = false
	default:
		// Decode it; publish it unless another runner is at it (the
		// others read envs[i] only once state 1 is stored).
		mine := st.CompareAndSwap(0, 3)
		s.cur = &s.env
		if mine {
			s.cur = &s.v.envs[i]
		}
		s.last = decodeRecord(e.Record.Data, s.cur) == nil
		if mine {
			if s.last {
				st.Store(1)
			} else {
				st.Store(2)
			}
		}
	}
	return e, nil
}

func (s *verifiedSlice) LastVerified() bool { return s.last }

func (s *verifiedSlice) LastEnvelope() (*wire.Envelope, bool) { return s.cur, s.last }

// EnvelopeValid reports whether b is a log record a Runner can decode
// without verifying it: within the size bound and passing
// wire.VerifyEnvelope.
func EnvelopeValid(b []byte) bool {
	return len(b) <= wire.MaxEnvelopeSize && wire.VerifyEnvelope(b) == nil
}

// Engine-reserved deduplication client ids. cmdlog picks random client ids
// with bit 62 set; these have it clear, so they never collide with one.
const (
	engineClientTag  = uint64(0xB5) << 56
	tickerClientKind = uint64(1) << 48
	outputClientKind = uint64(2) << 48
	// fencedOutputClientKind tags FencedOutputClientID.
	fencedOutputClientKind = uint64(3) << 48
	// MaxShards bounds a world's shard ids (they are 16 bits in output
	// client ids).
	MaxShards = 1 << 16
)

// TickerClientID is the deduplication client id of world's tick markers:
// TICK(n) is appended with id {TickerClientID(world), n}, so any number of
// tickers, restarted or racing, store each tick once.
func TickerClientID(world uint32) uint64 {
	return engineClientTag | tickerClientKind | uint64(world)
}

// OutputClientID is the deduplication client id of the outputs of shard in
// world: output k (counted from 1 over the shard's life, deterministic
// because the sim is) is appended with id {OutputClientID(world, shard), k}.
func OutputClientID(world, shard uint32) uint64 {
	return engineClientTag | outputClientKind | uint64(world)<<16 | uint64(shard&(MaxShards-1))
}

func checkShard(shard uint32) error {
	if shard >= MaxShards {
		return fmt.Errorf("replay: shard %d beyond %d", shard, MaxShards)
	}
	return nil
}
