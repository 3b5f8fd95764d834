package node

import (
	"context"
	"sync"
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
	// Mu, if set, is held from the first step of each round to the end of
	// its Ready: whoever else holds it may step the core and carry out a
	// Ready itself (a client's caller, which then needs no hand-off to
	// the loop). With Mu set, Inbox.DeliverInline does so too while the loop
	// runs: a message arriving when the core is free and nothing is
	// queued is stepped on the deliverer's goroutine (a link reader), so
	// an uncontended node costs no hand-off; under load messages queue
	// and the loop steps them in rounds as before.
	Mu *sync.Mutex
	// Wake, if set, makes the loop carry out a Ready with nothing new
	// stepped when it receives (a Ready that held its round until an
	// event elsewhere, such as a sync returning).
	Wake <-chan struct{}
}

// Run drives the core until ctx ends (returning nil) or Ready fails.
func (d Driver[R]) Run(ctx context.Context) error {
	var tick <-chan time.Time
	if d.Tick > 0 {
		t := time.NewTicker(d.Tick)
		defer t.Stop()
		tick = t.C
	}
	var failed chan error
	if d.Mu != nil && d.Inbox.q != nil {
		failed = make(chan error, 1)
		ds := &directStep{mu: d.Mu}
		ds.run = func(env msg.Envelope) {
			d.Step(env)
			if err := d.Ready(); err != nil {
				d.Inbox.q.direct.CompareAndSwap(ds, nil)
				select {
				case failed <- err:
				default:
				}
			}
		}
		d.Inbox.q.direct.Store(ds)
		defer func() {
			// Under Mu: no direct step runs after Run returns.
			d.Mu.Lock()
			d.Inbox.q.direct.CompareAndSwap(ds, nil)
			d.Mu.Unlock()
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case env := <-d.Inbox.C():
			d.lock()
			d.Inbox.Took(env)
			d.Step(env)
			d.drainInbox()
		case r := <-d.Requests:
			d.lock()
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
			d.lock()
			d.OnTick()
		case <-d.Wake:
			d.lock()
			d.drainInbox()
		}
		err := d.Ready()
		if d.Mu != nil {
			d.Mu.Unlock()
		}
		if err != nil {
			return err
		}
	}
}

func (d Driver[R]) lock() {
	if d.Mu != nil {
		d.Mu.Lock()
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
