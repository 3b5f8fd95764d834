package world

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// Record records the log src delivers (from position 1) of world id of
// game into a new recording at path, with cfg's tick range, policy,
// progress and logger (its sims, kinds, source and writer are set here),
// and returns the stats and the file's size. It closes the file whatever
// happens, so what was recorded stays readable.
func Record(ctx context.Context, path string, game Game, id uint32, src replay.Source, cfg bsr.RecordConfig) (bsr.RecordStats, int64, error) {
	w, err := bsr.Create(path, game.Header(id), bsr.WriterOptions{})
	if err != nil {
		return bsr.RecordStats{}, 0, err
	}
	base := game.RecordConfig()
	cfg.Source, cfg.Writer, cfg.NewSim, cfg.CommandKind, cfg.KindNames = src, w, base.NewSim, base.CommandKind, base.KindNames
	st, err := bsr.Record(ctx, cfg)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return st, w.Stats().Bytes, err
}

// Recording records a running world's log into a .bsr file while the
// match runs: its own runners follow the log from position 1, and the
// writer appends chunks as ticks complete, so a crash leaves a file
// readable up to the last complete chunk.
type Recording struct {
	path   string
	tick   atomic.Uint64
	cancel context.CancelFunc
	done   chan struct{}
	size   int64
	stats  bsr.RecordStats
	err    error
}

// StartRecording starts recording world id of game from log into path;
// Finish ends it.
func StartRecording(ctx context.Context, path string, game Game, id uint32, log Log, cfg bsr.RecordConfig) *Recording {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lr := &Recording{path: path, cancel: cancel, done: make(chan struct{})}
	progress := cfg.Progress
	cfg.Progress = func(t uint64) {
		lr.tick.Store(t)
		if progress != nil {
			progress(t)
		}
	}
	go func() {
		defer close(lr.done)
		lr.stats, lr.size, lr.err = Record(rctx, path, game, id, log.Subscribe(1), cfg)
	}()
	return lr
}

// Path returns the recording's file.
func (lr *Recording) Path() string { return lr.path }

// Tick returns the last tick recorded.
func (lr *Recording) Tick() uint64 { return lr.tick.Load() }

// Finish waits until the recording holds tick final (or ctx ends), stops
// it, and returns the file's size.
func (lr *Recording) Finish(ctx context.Context, final uint64) (int64, error) {
	wait := time.NewTicker(5 * time.Millisecond)
	defer wait.Stop()
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
		case <-wait.C:
		}
	}
	lr.cancel()
	<-lr.done
	if errors.Is(lr.err, context.Canceled) {
		lr.err = nil
	}
	return lr.size, lr.err
}

// Stop ends the recording where it is.
func (lr *Recording) Stop() {
	lr.cancel()
	<-lr.done
}
