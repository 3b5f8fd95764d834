package node

import (
	"context"
	"sync/atomic"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
)

// PipelinedWAL is a WAL that can begin a synced write and wait for its
// sync apart (wal.Pebble: Pebble's ApplyNoSyncWait), so that a replica in
// fsync durability keeps stepping messages while a sync is in flight.
type PipelinedWAL interface {
	WAL
	// StartAppend writes ops as Append does but returns before they are
	// synced. wait, called once, from any goroutine, in the order of the
	// StartAppends, returns once they are synced, and with them every
	// write started before. After a failed StartAppend, or a failed wait,
	// the replica calls rewind of the oldest write that failed and writes
	// its ops and those of every write started after it again with
	// Append, in order, after every earlier wait returned (so they take
	// the same keys again). Only wait may be called off the replica's
	// goroutine.
	StartAppend(ops []seq.PersistOp) (wait func() error, rewind func(), err error)
}

// maxSyncsInFlight is how many of a replica's WAL writes may be waiting
// for their sync before it holds its next round (the steps go on): one.
// The round's Ready is carried out when the sync returns, with everything
// stepped meanwhile, so a round is as large as with a sync in series (one
// write and one acknowledgement per client per sync), but the stepping,
// the sends of the synced round and the heartbeats overlap the sync.
const maxSyncsInFlight = 1

// pipeDepth bounds the rounds queued behind syncs (a tick's round passes
// the hold above, so a stalled disk queues one per tick); a full queue
// blocks the loop.
const pipeDepth = 1024

// syncPipe carries out a replica's rounds in fsync durability: the loop
// starts each round's WAL write and queues the round; the pipe's sender
// goroutine waits for the round's sync and only then sends its messages,
// in the order of the rounds: no message leaves before the write of its
// round and of every round before it is synced. A round without writes
// queues behind the rounds before it, unless none is pending.
type syncPipe struct {
	send  func(msg.Envelope)
	items chan pipeItem
	// wake tells the loop that a sync returned (Driver.Wake).
	wake chan struct{}
	done chan struct{}
	// pending counts the rounds queued and not yet carried out (sent, or
	// handed back failed); inFlight the writes whose wait has not
	// returned.
	pending, inFlight atomic.Int64
	// broken is set when a write failed: the rounds from it on are held
	// until the loop takes them back (drain) and writes them again.
	broken atomic.Bool
	// held is set while the loop holds a round for a sync in flight: only
	// then does a returning sync wake it (an idle loop needs no extra
	// round).
	held atomic.Bool
}

type pipeItem struct {
	wait   func() error // nil: nothing to wait for
	rewind func()
	ops    []seq.PersistOp
	msgs   []msg.Envelope
	// drain, if set, asks for the failed rounds (a request, not a round).
	drain chan []pipeItem
}

func newSyncPipe(ctx context.Context, send func(msg.Envelope)) *syncPipe {
	p := &syncPipe{send: send, items: make(chan pipeItem, pipeDepth), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *syncPipe) run(ctx context.Context) {
	defer close(p.done)
	var failed []pipeItem
	for it := range p.items {
		if it.drain != nil {
			p.broken.Store(false)
			it.drain <- failed
			failed = nil
			continue
		}
		ok := len(failed) == 0
		if it.wait != nil {
			// A write after a failed one is waited for too (it releases
			// its batch), and written again with it.
			if err := it.wait(); err != nil {
				ok = false
			}
		}
		if !ok {
			failed = append(failed, it)
			p.broken.Store(true)
		} else if ctx.Err() == nil {
			for _, m := range it.msgs {
				p.send(m)
			}
		}
		if ok {
			p.pending.Add(-1)
		}
		if it.wait != nil {
			p.inFlight.Add(-1)
			if p.held.Swap(false) || !ok {
				select {
				case p.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// close stops the sender after it waited for every queued write.
func (p *syncPipe) close() {
	close(p.items)
	<-p.done
}

// hold reports whether the loop should hold its next round (not a
// tick's): a sync is in flight and the pipe is not broken.
func (p *syncPipe) hold() bool {
	// held before inFlight is read: a sync returning after the read sees
	// it and wakes the loop.
	p.held.Store(true)
	if p.inFlight.Load() >= maxSyncsInFlight && !p.broken.Load() {
		return true
	}
	p.held.Store(false)
	return false
}

// round carries out one round: writes w (nil: ops are empty) and queues
// msgs behind the write's sync. It returns false if ctx ended while a
// failed write was retried (nothing more may be sent).
func (p *syncPipe) round(ctx context.Context, w PipelinedWAL, retry func(func() error) error, ops []seq.PersistOp, msgs []msg.Envelope) bool {
	if p.broken.Load() {
		return p.recover(ctx, w, retry, ops, msgs)
	}
	if len(ops) == 0 {
		if len(msgs) == 0 {
			return true
		}
		if p.pending.Load() == 0 {
			for _, m := range msgs {
				p.send(m)
			}
			return true
		}
		p.pending.Add(1)
		p.items <- pipeItem{msgs: msgs}
		return true
	}
	wait, rewind, err := w.StartAppend(ops)
	if err != nil {
		return p.recover(ctx, w, retry, ops, msgs)
	}
	p.pending.Add(1)
	p.inFlight.Add(1)
	p.items <- pipeItem{wait: wait, rewind: rewind, ops: ops, msgs: msgs}
	return true
}

// recover takes back the rounds the sender holds since a write failed,
// once every earlier write was waited for, and writes them and this
// round's ops again in one synced Append (retried until it succeeds),
// then sends all their messages in order.
func (p *syncPipe) recover(ctx context.Context, w PipelinedWAL, retry func(func() error) error, ops []seq.PersistOp, msgs []msg.Envelope) bool {
	back := make(chan []pipeItem, 1)
	p.items <- pipeItem{drain: back}
	failed := <-back
	var all []seq.PersistOp
	for _, it := range failed {
		all = append(all, it.ops...)
	}
	all = append(all, ops...)
	if len(failed) > 0 {
		failed[0].rewind()
	}
	if len(all) > 0 {
		if err := retry(func() error { return w.Append(all) }); err != nil {
			return false
		}
	}
	// Nothing is queued behind the drain: the loop was here.
	for _, it := range failed {
		for _, m := range it.msgs {
			p.send(m)
		}
	}
	p.pending.Add(-int64(len(failed)))
	for _, m := range msgs {
		p.send(m)
	}
	return true
}

// liveness reports whether m promises nothing about storage and is sent
// at once, ahead of the round's sync: heartbeats and their answers, which
// carry the sender's view, contact and a stable-gp that is durable
// already (the leader raises it only on GC acknowledgements, which its
// followers send after syncing the GC its own synced round sent them).
func liveness(m msg.Message) bool {
	switch m.(type) {
	case msg.Heartbeat, msg.HeartbeatAck:
		return true
	}
	return false
}
