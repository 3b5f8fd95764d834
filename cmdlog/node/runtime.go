// Package node runs the cmdlog protocol cores as live nodes: one goroutine
// per node owns its core, feeds it inbound messages and clock ticks, and
// carries out its Ready (persist, then send). Many inbound messages are
// stepped before each Ready, so persistence is group-committed and outbound
// messages are batched. Transports and storage are injected.
package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// Transport carries envelopes between nodes.
type Transport interface {
	// Send queues env for delivery to env.To. It must not block for long:
	// when a peer is unreachable or its queue is full, the message may be
	// dropped (the protocol retries).
	Send(env msg.Envelope)
}

// Timing converts the cores' logical ticks to wall time.
type Timing struct {
	// Tick is the wall-clock length of one protocol tick (default 5ms).
	Tick time.Duration
}

func (t Timing) tick() time.Duration {
	if t.Tick <= 0 {
		return 5 * time.Millisecond
	}
	return t.Tick
}

// inboxSize bounds a node's queue of inbound messages, and inboxBytes
// their estimated size (MessageSize): a peer or client that sends faster
// than the node steps costs at most that much memory, whatever the size
// of its messages (a link's frames are at most 8 MiB).
const (
	inboxSize  = 65536
	inboxBytes = 64 << 20
)

// maxStepsPerReady caps messages stepped between two Ready calls.
const maxStepsPerReady = 4096

// Inbox is a node's inbound queue, bounded in messages and in bytes.
// Transports deliver into it; the node's Driver takes from it. Copies of an
// Inbox share its queue; the zero value delivers nothing.
type Inbox struct{ q *inboxQueue }

type inboxQueue struct {
	ch       chan msg.Envelope
	bytes    atomic.Int64
	maxBytes int64
	dropped  atomic.Uint64
	// direct, if set, steps a message into the core on the deliverer's
	// goroutine (see Driver.Mu).
	direct atomic.Pointer[directStep]
}

// directStep lets Deliver step the core itself: when mu is free and
// nothing is queued, run steps env and carries out the Ready under mu.
type directStep struct {
	mu  *sync.Mutex
	run func(msg.Envelope)
}

// NewInbox returns an inbox of the default bounds.
func NewInbox() Inbox { return newInbox(inboxSize, inboxBytes) }

func newInbox(n int, maxBytes int64) Inbox {
	return Inbox{q: &inboxQueue{ch: make(chan msg.Envelope, n), maxBytes: maxBytes}}
}

// DeliverInline is Deliver for a goroutine that only delivers (a mesh
// link's reader): when the node's Driver allows it (Driver.Mu) and the
// core is free with nothing queued, it steps env and carries out the Ready
// itself, on the caller's goroutine, so an uncontended node costs no
// hand-off. The Ready may block (a WAL write and its retries), so a caller
// that must not wait on the node (a sender in another node's Ready, as
// LocalNet's) uses Deliver. Messages queued before env are always stepped
// first.
func (in Inbox) DeliverInline(env msg.Envelope) bool {
	q := in.q
	if q == nil {
		return false
	}
	if d := q.direct.Load(); d != nil && q.bytes.Load() == 0 && d.mu.TryLock() {
		// Checked again under mu: the loop may have taken a message it
		// has not stepped yet (its bytes are released only once stepped),
		// or stopped.
		if q.bytes.Load() == 0 && q.direct.Load() == d {
			d.run(env)
			d.mu.Unlock()
			return true
		}
		d.mu.Unlock()
	}
	return in.Deliver(env)
}

// Deliver queues env without blocking; it reports false if the inbox is
// full, in messages or bytes (the message is dropped; the sender retries).
func (in Inbox) Deliver(env msg.Envelope) bool {
	q := in.q
	if q == nil {
		return false
	}
	n := int64(MessageSize(env.Msg))
	if q.bytes.Add(n) > q.maxBytes {
		q.bytes.Add(-n)
		q.dropped.Add(1)
		return false
	}
	select {
	case q.ch <- env:
		return true
	default:
		q.bytes.Add(-n)
		q.dropped.Add(1)
		return false
	}
}

// C is the channel the inbox's messages come out of (nil for the zero
// Inbox). Whoever takes a message from it calls Took.
func (in Inbox) C() <-chan msg.Envelope {
	if in.q == nil {
		return nil
	}
	return in.q.ch
}

// Took releases the bytes of env, taken from C.
func (in Inbox) Took(env msg.Envelope) {
	if in.q != nil {
		in.q.bytes.Add(-int64(MessageSize(env.Msg)))
	}
}

// Bytes returns the estimated size of the messages queued, and Dropped
// how many were refused so far.
func (in Inbox) Bytes() int64 {
	if in.q == nil {
		return 0
	}
	return in.q.bytes.Load()
}

// Dropped returns how many messages the inbox refused (full).
func (in Inbox) Dropped() uint64 {
	if in.q == nil {
		return 0
	}
	return in.q.dropped.Load()
}

// MessageSize estimates the encoded size of m, for byte budgets of
// queues (the inbox, a mesh link's): the records' data and a fixed cost
// per item.
func MessageSize(m msg.Message) int {
	const item, base = 40, 64
	n := base
	switch m := m.(type) {
	case msg.Append:
		for _, r := range m.Records {
			n += len(r.Data) + item
		}
	case msg.Store:
		for _, e := range m.Entries {
			n += len(e.Record.Data) + item
		}
	case msg.ReadResp:
		for _, e := range m.Entries {
			n += len(e.Record.Data) + item
		}
	case msg.AppendAck:
		n += len(m.IDs) * item
	case msg.AppendReject:
		n += len(m.IDs) * item
	case msg.GC:
		n += len(m.IDs) * item
	case msg.StartView:
		n += viewSize(m.View)
	case msg.CoordCAS:
		n += viewSize(m.View)
	case msg.CoordResp:
		n += viewSize(m.View)
	}
	return n
}

func viewSize(v msg.ViewRecord) int {
	n := len(v.Members) * 8
	for _, d := range v.Dedup {
		n += 24 + 8*len(d.Above)
	}
	return n
}

// coordinatorProxy turns the cores' CoordGet/CoordCAS messages into calls
// on a coord.Coordinator and their answers into CoordResp messages.
type coordinatorProxy struct {
	c       coord.Coordinator
	timeout time.Duration
	log     *slog.Logger
}

func (p coordinatorProxy) handle(ctx context.Context, env msg.Envelope, reply func(msg.Envelope)) {
	go func() {
		ctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		var resp msg.CoordResp
		switch m := env.Msg.(type) {
		case msg.CoordGet:
			v, rev, err := p.c.Get(ctx)
			switch {
			case err == nil:
				resp = msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: rev, View: v}
			case errors.Is(err, coord.ErrNotFound):
				resp = msg.CoordResp{ReqID: m.ReqID, OK: true}
			default:
				p.log.Warn("coordinator get failed", "err", err)
				return // the core retries
			}
		case msg.CoordCAS:
			rev, err := p.c.CompareAndSet(ctx, m.ExpectRev, m.View)
			switch {
			case err == nil:
				resp = msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: rev, View: m.View}
			case errors.Is(err, coord.ErrConflict):
				v, rev, gerr := p.c.Get(ctx)
				if gerr != nil {
					p.log.Warn("coordinator get after conflict failed", "err", gerr)
					return
				}
				resp = msg.CoordResp{ReqID: m.ReqID, OK: false, Rev: rev, View: v}
			default:
				p.log.Warn("coordinator compare-and-set failed", "err", err)
				return
			}
		default:
			return
		}
		reply(msg.Envelope{From: msg.Coordinator, To: env.From, Msg: resp})
	}()
}
