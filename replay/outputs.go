package replay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// outputQueue carries a shard's outputs from the tick loop to the log. The
// tick loop never waits for it: push only appends to a slice. One goroutine
// (run) appends the records one after the other, in order, each once
// durable before the next starts, so the shard's outputs are in the log in
// the order it produced them. acked is the highest tick all of whose
// outputs (and those of earlier ticks) are durable.
type outputQueue struct {
	client uint64
	clock  Clock // for the backoff between retries

	mu    sync.Mutex
	items []outItem
	wake  chan struct{}

	acked *watermark
	// seen is the highest output seq of this shard the runner has read
	// back from the log: outputs up to it are durable (they are appended in
	// order), so a recovering runner does not append them again.
	seen atomic.Uint64

	appended, skipped, dropped atomic.Uint64

	// A fenced queue (RunnerConfig.Epoch) appends with fencedClient, and
	// only once gate is closed (open): its runner read its own lease
	// claim, and with it base, the outputs of the shard before the claim.
	fenced       bool
	fencedClient uint64
	gate         chan struct{}
	base         atomic.Uint64
	opened       atomic.Bool
}

// open lets a fenced queue append, counting its request ids from base.
func (q *outputQueue) open(base uint64) {
	if q.opened.CompareAndSwap(false, true) {
		q.base.Store(base)
		close(q.gate)
	}
}

// recordID returns the record id of output seq.
func (q *outputQueue) recordID(seq uint64) msg.RecordID {
	if q.fenced {
		return msg.RecordID{Client: q.fencedClient, Seq: seq - q.base.Load()}
	}
	return msg.RecordID{Client: q.client, Seq: seq}
}

type outItem struct {
	tick uint64
	seq  uint64 // 0 marks the end of tick's outputs
	data []byte
}

func newOutputQueue(client uint64, acked uint64, clock Clock) *outputQueue {
	return &outputQueue{client: client, clock: clock, wake: make(chan struct{}, 1), acked: newWatermark(acked)}
}

func (q *outputQueue) push(it outItem) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pending returns the number of queued items (outputs and tick ends).
func (q *outputQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// run appends queued outputs through app until ctx ends.
func (q *outputQueue) run(ctx context.Context, app Appender, log *slog.Logger) error {
	var batch []outItem
	for {
		q.mu.Lock()
		batch, q.items = q.items, batch[:0]
		q.mu.Unlock()
		if len(batch) > 0 && q.fenced && !q.opened.Load() {
			q.mu.Lock()
			q.items = append(batch, q.items...)
			q.mu.Unlock()
			batch = nil
			select {
			case <-q.gate:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(batch) == 0 {
			select {
			case <-q.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := q.appendBatch(ctx, app, batch, log); err != nil {
			return err
		}
	}
}

// appendQueued appends the outputs queued so far on the caller's goroutine
// (a Synchronous runner's tick loop) and returns when they are durable or
// ctx ended.
func (q *outputQueue) appendQueued(ctx context.Context, app Appender, log *slog.Logger) error {
	if q.fenced && !q.opened.Load() {
		return nil // kept until the runner reads its claim
	}
	q.mu.Lock()
	batch := q.items
	q.items = nil
	q.mu.Unlock()
	return q.appendBatch(ctx, app, batch, log)
}

// appendBatch appends batch's outputs in order and raises acked at each
// tick end.
func (q *outputQueue) appendBatch(ctx context.Context, app Appender, batch []outItem, log *slog.Logger) error {
	for k := range batch {
		it := &batch[k]
		if it.seq == 0 {
			q.acked.raise(it.tick)
			continue
		}
		if it.seq <= q.seen.Load() || (q.fenced && it.seq <= q.base.Load()) {
			q.skipped.Add(1)
		} else if err := q.appendOne(ctx, app, it, log); err != nil {
			return err
		}
		it.data = nil
	}
	return nil
}

// appendOne appends one output, retrying transient errors until it is
// durable or ctx ends.
func (q *outputQueue) appendOne(ctx context.Context, app Appender, it *outItem, log *slog.Logger) error {
	backoff := 5 * time.Millisecond
	for {
		err := app.AppendWithID(ctx, q.recordID(it.seq), it.data)
		if err == nil {
			q.appended.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrLogClosed) {
			// Nothing will make this record appendable: drop it rather
			// than wedge the shard's outputs behind it.
			q.dropped.Add(1)
			log.Error("output dropped", "tick", it.tick, "seq", it.seq, "err", err)
			return nil
		}
		select {
		case <-q.clock.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}
