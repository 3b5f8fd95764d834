package node

import (
	"context"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Driver wires one pure protocol core to its inbox, its clock and its
// Ready. Every core (sequencing replica, shard, client) runs in the same
// loop: take everything queued (inbound messages, local requests) or one
// tick, step it into the core, then carry out one Ready. Stepping
// everything queued before a Ready is what batches the cores' work: one
// WAL sync or storage batch per round, one message per peer where the core
// coalesces, and one pass over the outbound queue.
type Driver[R any] struct {
	// Inbox receives the node's messages.
	Inbox Inbox
	// Tick is the interval between OnTick calls (0: never).
	Tick   time.Duration
	Step   func(msg.Envelope)
	OnTick func()
	// Requests, if set, carries local calls (a client's appends and
	// reads); Submit hands each to the core.
	Requests <-chan R
	Submit   func(R)
	// Ready carries out the core's work after a round; an error stops
	// the loop and is returned.
	Ready func() error
}

// Run drives the core until ctx ends (returning nil) or Ready fails.
func (d Driver[R]) Run(ctx context.Context) error {
	var tick <-chan time.Time
	if d.Tick > 0 {
		t := time.NewTicker(d.Tick)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case env := <-d.Inbox.C():
			d.Inbox.Took(env)
			d.Step(env)
			d.drainInbox()
		case r := <-d.Requests:
			d.Submit(r)
			// Everything queued joins this round.
			for i := 1; i < maxStepsPerReady; i++ {
				select {
				case r = <-d.Requests:
					d.Submit(r)
					continue
				default:
				}
				break
			}
			d.drainInbox()
		case <-tick:
			d.OnTick()
		}
		if err := d.Ready(); err != nil {
			return err
		}
	}
}

func (d Driver[R]) drainInbox() {
	for i := 1; i < maxStepsPerReady; i++ {
		select {
		case env := <-d.Inbox.C():
			d.Inbox.Took(env)
			d.Step(env)
			continue
		default:
		}
		return
	}
}
