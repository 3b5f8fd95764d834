package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// SegmentPath returns the path of segment k (1, 2, ...) of a recording at
// path: path itself for the first, then "NAME.k.bsr" beside it.
func SegmentPath(path string, k int) string {
	if k <= 1 {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.%d%s", strings.TrimSuffix(path, ext), k, ext)
}

// Segments returns the segments of the recording at path that exist, in
// order.
func Segments(path string) []string {
	var out []string
	for k := 1; ; k++ {
		p := SegmentPath(path, k)
		if _, err := os.Stat(p); err != nil {
			return out
		}
		out = append(out, p)
	}
}

// maxCutHeader bounds the size of a last segment that StartSegmentRecording
// takes for one cut before its header was whole (a recording's header is
// smaller).
const maxCutHeader = 4096

// StartSegmentRecording records world id of game from log into the
// recording at path, as StartRecording does, across restarts of the
// process: when path already holds segments of this world (a recording
// cut by a crash, or closed by a stop), they are kept as they are and a new
// segment starts at the tick after the last one they hold (its runners
// fast-forward through the log to there, then record from a full snapshot
// of every shard). Each segment verifies on its own; together they cover
// the match. It returns the recording and the path of the new segment.
func StartSegmentRecording(ctx context.Context, path string, game Game, id uint32, log Log, cfg bsr.RecordConfig) (*Recording, string, error) {
	segs := Segments(path)
	var last uint64
	for i, p := range segs {
		r, err := bsr.Open(p)
		if err != nil {
			if st, serr := os.Stat(p); serr == nil && i == len(segs)-1 && st.Size() < maxCutHeader {
				// A process killed as it created its segment left a
				// file without a whole header: the new segment
				// replaces it.
				segs = segs[:i]
				break
			}
			return nil, "", fmt.Errorf("recording segment %s: %w (move it away to start a new recording)", p, err)
		}
		h := r.Header()
		lt := r.LastTick()
		if cps := r.Checkpoints(); len(cps) > 0 {
			// A signed segment: the next one proves it extends this one.
			cfg.LinkSizes = append(cfg.LinkSizes, cps[len(cps)-1].Size)
		}
		r.Close()
		if h.Game != game.Name || h.World != id || string(h.GameConfig) != string(game.Config) {
			return nil, "", fmt.Errorf("recording %s is of another world (%s world %d): give another --record path", p, h.Game, h.World)
		}
		last = max(last, lt)
	}
	next := SegmentPath(path, len(segs)+1)
	if last > 0 {
		cfg.FromTick = last + 1
	}
	return StartRecording(ctx, next, game, id, log, cfg), next, nil
}
