package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay/bsr"
)

// liveRecording records a world's log into a .bsr file while the match
// runs: its own runners follow the log from position 1, and the writer
// appends chunks as ticks complete, so a crash leaves a file readable up
// to the last complete chunk.
type liveRecording struct {
	path   string
	tick   atomic.Uint64
	cancel context.CancelFunc
	done   chan struct{}
	size   int64
	stats  bsr.RecordStats
	err    error
}

func startLiveRecording(ctx context.Context, path string, game broadside.Config, world uint32, log worldLog) *liveRecording {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lr := &liveRecording{path: path, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(lr.done)
		lr.stats, lr.size, lr.err = recordBroadside(rctx, path, game, world, log.Subscribe(1), bsr.RecordConfig{
			Progress: func(t uint64) { lr.tick.Store(t) },
		})
	}()
	return lr
}

// finish waits until the recording holds tick final (or ctx ends), stops
// it, and returns the file's size.
func (lr *liveRecording) finish(ctx context.Context, final uint64) (int64, error) {
	for lr.tick.Load() < final {
		select {
		case <-lr.done:
			lr.cancel()
			if lr.err == nil {
				lr.err = fmt.Errorf("recording stopped at tick %d, before tick %d", lr.tick.Load(), final)
			}
			return lr.size, lr.err
		case <-ctx.Done():
			lr.cancel()
			<-lr.done
			return lr.size, fmt.Errorf("recording reached tick %d of %d: %w", lr.tick.Load(), final, ctx.Err())
		default:
		}
		sleepCtx(ctx, 5e6)
	}
	lr.cancel()
	<-lr.done
	if errors.Is(lr.err, context.Canceled) {
		lr.err = nil
	}
	return lr.size, lr.err
}
