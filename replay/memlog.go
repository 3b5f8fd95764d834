package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// ErrTrimmed is returned by MemLog reads of positions trimmed away.
var ErrTrimmed = errors.New("replay: position trimmed")

// ErrLogClosed is returned by appends to a closed MemLog.
var ErrLogClosed = errors.New("replay: log closed")

// MemLog is an in-memory, totally ordered log with cmdlog's client
// semantics, for tests, benchmarks and offline tools: appends are ordered
// as they arrive, AppendWithID stores each (client, seq) once (the
// replicas' per-client id windows, cmdlog/dedup), reads of positions not
// yet appended wait, and Trim discards a prefix. Close marks the end:
// subscribers then get ErrEndOfLog after the last entry. It is safe for
// concurrent use.
type MemLog struct {
	mu      sync.Mutex
	entries []msg.Entry // positions first .. first+len-1
	first   uint64      // position of entries[0]
	grown   chan struct{}
	closed  bool
	dedup   dedup.Table
	seq     uint64 // request ids of plain Appends
}

// memClientID is the client id of MemLog.Append's records.
const memClientID = 1<<62 | 0x6d656d // bit 62 set like cmdlog's random ids

// NewMemLog returns an empty log; its first position is 1.
func NewMemLog() *MemLog {
	return &MemLog{first: 1, grown: make(chan struct{}), dedup: dedup.NewTable()}
}

// Append appends data with a fresh id.
func (l *MemLog) Append(ctx context.Context, data []byte) error {
	l.mu.Lock()
	l.seq++
	id := msg.RecordID{Client: memClientID, Seq: l.seq}
	l.mu.Unlock()
	return l.AppendWithID(ctx, id, data)
}

// AppendWithID appends a copy of data with id unless a record with id was
// appended before (then it returns nil and stores nothing).
func (l *MemLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLogClosed
	}
	if !l.dedup.Add(id) {
		return nil
	}
	l.entries = append(l.entries, msg.Entry{Pos: l.first + uint64(len(l.entries)), Record: msg.Record{ID: id, Data: slices.Clone(data)}})
	close(l.grown)
	l.grown = make(chan struct{})
	return nil
}

// AppendWithIDAsync is AppendWithID calling done with its outcome before
// it returns (a MemLog never waits).
func (l *MemLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	done(l.AppendWithID(ctx, id, data))
	return nil
}

// Tail returns the position of the last entry (0 if none was appended).
func (l *MemLog) Tail() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first + uint64(len(l.entries)) - 1
}

// CheckTail returns Tail (cmdlog.Client's signature).
func (l *MemLog) CheckTail(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return l.Tail(), nil
}

// Read returns up to max entries from position from on, waiting while from
// is beyond the tail. After Close it returns ErrEndOfLog instead of
// waiting.
func (l *MemLog) Read(ctx context.Context, from uint64, max int) ([]msg.Entry, error) {
	if from == 0 {
		return nil, fmt.Errorf("replay: read: positions start at 1")
	}
	for {
		l.mu.Lock()
		if from < l.first {
			first := l.first
			l.mu.Unlock()
			return nil, fmt.Errorf("read %d (first %d): %w", from, first, ErrTrimmed)
		}
		if k := from - l.first; k < uint64(len(l.entries)) {
			end := min(uint64(len(l.entries)), k+uint64(max))
			out := slices.Clone(l.entries[k:end])
			l.mu.Unlock()
			return out, nil
		}
		closed, grown := l.closed, l.grown
		l.mu.Unlock()
		if closed {
			return nil, ErrEndOfLog
		}
		select {
		case <-grown:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Entries returns a copy of the retained entries from position from on.
func (l *MemLog) Entries(from uint64) []msg.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(uint64(len(l.entries)), from-min(from, l.first))
	return slices.Clone(l.entries[k:])
}

// Trim discards the entries up to and including position upTo and returns
// the position of the first one kept minus one.
func (l *MemLog) Trim(ctx context.Context, upTo uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if upTo >= l.first {
		n := min(upTo-l.first+1, uint64(len(l.entries)))
		l.entries = slices.Clone(l.entries[n:])
		l.first += n
	}
	return l.first - 1, nil
}

// Close ends the log: appends fail and readers at the end get ErrEndOfLog.
func (l *MemLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.grown)
		l.grown = make(chan struct{})
	}
}

// Subscribe returns a Source delivering the entries from position from on.
func (l *MemLog) Subscribe(from uint64) *MemSubscription {
	return &MemSubscription{log: l, next: max(from, 1)}
}

// MemSubscription is a Source over a MemLog.
type MemSubscription struct {
	log  *MemLog
	next uint64
	buf  []msg.Entry
}

// Position returns the position of the next entry.
func (s *MemSubscription) Position() uint64 { return s.next }

// Next implements Source.
func (s *MemSubscription) Next(ctx context.Context) (msg.Entry, error) {
	if len(s.buf) == 0 {
		b, err := s.log.Read(ctx, s.next, 1024)
		if err != nil {
			return msg.Entry{}, err
		}
		s.buf = b
	}
	e := s.buf[0]
	s.buf = s.buf[1:]
	s.next = e.Pos + 1
	return e, nil
}
