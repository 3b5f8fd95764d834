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

// inboxSize bounds a node's queue of inbound messages.
const inboxSize = 65536

// maxStepsPerReady caps messages stepped between two Ready calls.
const maxStepsPerReady = 4096

// Inbox is a node's inbound queue. Transports deliver into it.
type Inbox chan msg.Envelope

// NewInbox returns an inbox of the default size.
func NewInbox() Inbox { return make(Inbox, inboxSize) }

// Deliver queues env without blocking; it reports false if the inbox is
// full (the message is dropped; the sender retries).
func (in Inbox) Deliver(env msg.Envelope) bool {
	select {
	case in <- env:
		return true
	default:
		return false
	}
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
