package server

import (
	"context"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// FloorAppender is an AsyncAppender that takes the producer's floor of a
// record's client with it (*cmdlog.Client and cmdlog's remote client):
// every id of that client below floor is complete or abandoned, so the
// log's replicas move the client's dedup mark up and close the holes a
// session's refused commands leave (see ids.go).
type FloorAppender interface {
	AsyncAppender
	AppendWithFloorAsync(ctx context.Context, id msg.RecordID, floor uint64, data []byte, done func(error)) error
}

// sessionFloor tracks which of a connection's commands are settled, to
// declare the session's floor with each append: the lowest sequence
// number that is neither stored (acknowledged durable) nor refused
// (rate-limited, busy, draining), nor below the first one this
// connection received.
//
// Below the first: the client library resends every command it has no
// result for, in sequence order, before any new one (netcode/client), and
// the server requires increasing sequence numbers on a connection, so a
// command below the first one a connection receives has its result
// (stored or refused) already. Refused ones are never appended anywhere
// (the library does not resend a command it has a result for), so they
// are abandoned; stored ones are complete. A command whose append failed
// (its session ended, or ErrOutcomeUnknown) stays unsettled: the player
// has no result and resends it on its next connection.
type sessionFloor struct {
	mu      sync.Mutex
	started bool
	last    uint64          // the highest sequence number received
	open    map[uint64]bool // received, appended, not yet stored
	settled uint64          // the highest GameCommand.Settled received (0: none)
}

// receive notes seq, received on the connection with the client's
// settled (GameCommand.Settled), and returns the floor to declare with it
// when it is appended (refused is false).
func (f *sessionFloor) receive(seq uint64, refused bool, settled uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		f.started = true
		f.open = make(map[uint64]bool)
	}
	f.last = max(f.last, seq)
	f.settled = max(f.settled, settled)
	if !refused {
		f.open[seq] = true
	}
	return f.floorLocked(seq)
}

// stored settles seq: its append succeeded.
func (f *sessionFloor) stored(seq uint64) {
	f.mu.Lock()
	delete(f.open, seq)
	f.mu.Unlock()
}

// floorLocked is the lowest open sequence number, or the one after the
// last received; never above upTo, nor above what the client has settled.
func (f *sessionFloor) floorLocked(upTo uint64) uint64 {
	fl := f.last + 1
	for s := range f.open {
		fl = min(fl, s)
	}
	if f.settled != 0 {
		fl = min(fl, f.settled)
	}
	return min(fl, upTo)
}
