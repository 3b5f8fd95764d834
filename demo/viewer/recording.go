package viewer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// Recording plays a .bsr recording of a Broadside match: a bsr.Seeker
// re-creates the world at any tick (restoring the nearest snapshots and
// replaying the recorded log: the same Runner as live play), the frames
// are read from the sectors, Why queries the recorded lineage, and a
// background bsr.Verify re-simulates the whole recording and compares
// every tick's state hashes.
type Recording struct {
	r      *bsr.Reader
	seeker *bsr.Seeker
	cfg    broadside.Config
	world  World
	frame  Frame

	ixOnce sync.Once
	ix     *lineage.Index
	ixErr  error

	mu     sync.Mutex
	verify Verification
	// diverged is a divergence met while seeking: it fails verification
	// before the background run gets there.
	diverged error

	cancel context.CancelFunc
	done   chan struct{}
}

var _ Source = (*Recording)(nil)

// RecordingOptions configures OpenRecordingWith.
type RecordingOptions struct {
	// NoVerify skips the background verification (VerifyNone).
	NoVerify bool
}

// OpenRecording opens the recording at path, positioned at its first
// tick, and starts verifying it in the background.
func OpenRecording(ctx context.Context, path string) (*Recording, error) {
	return OpenRecordingWith(ctx, path, RecordingOptions{})
}

// OpenRecordingWith is OpenRecording with options.
func OpenRecordingWith(ctx context.Context, path string, o RecordingOptions) (*Recording, error) {
	r, err := bsr.Open(path)
	if err != nil {
		return nil, err
	}
	rec, err := newRecording(r, path, o)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("viewer: %s: %w", path, err)
	}
	return rec, nil
}

// OpenRecordingBytes opens the recording held in data (a browser fetched
// it from a URL or read a file the user picked), named name, as
// OpenRecordingWith opens a file.
func OpenRecordingBytes(ctx context.Context, name string, data []byte, o RecordingOptions) (*Recording, error) {
	r, err := bsr.NewReader(memFile{bytes.NewReader(data)}, name, int64(len(data)))
	if err != nil {
		return nil, err
	}
	rec, err := newRecording(r, name, o)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("viewer: %s: %w", name, err)
	}
	return rec, nil
}

// memFile is a recording in memory, as a bsr.File.
type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

func newRecording(r *bsr.Reader, path string, o RecordingOptions) (*Recording, error) {
	h := r.Header()
	if h.Game != broadside.GameName {
		return nil, fmt.Errorf("a recording of %q, not of %q", h.Game, broadside.GameName)
	}
	var cfg broadside.Config
	if err := cfg.UnmarshalBinary(h.GameConfig); err != nil {
		return nil, err
	}
	if uint32(cfg.Sectors()) != h.Shards {
		return nil, fmt.Errorf("%d shards recorded for a world of %d sectors", h.Shards, cfg.Sectors())
	}
	rec := &Recording{r: r, cfg: cfg, done: make(chan struct{})}
	var err error
	if rec.world, err = WorldOf(filepath.Base(path), cfg); err != nil {
		return nil, err
	}
	if h.TickRate != 0 {
		rec.world.TickRate = int(h.TickRate)
	}
	if rec.seeker, err = bsr.NewSeeker(r, rec.newSim); err != nil {
		return nil, err
	}
	if err := rec.Seek(r.FirstTick()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec.cancel = cancel
	switch {
	case o.NoVerify:
		close(rec.done)
	case h.SchemaVersion != broadside.SchemaVersion:
		rec.verify = Verification{State: VerifyFailed, Detail: fmt.Sprintf("recorded with rules version %d; this viewer simulates version %d",
			h.SchemaVersion, broadside.SchemaVersion)}
		close(rec.done)
	default:
		rec.verify = Verification{State: VerifyRunning}
		go rec.runVerify(ctx)
	}
	return rec, nil
}

func (rec *Recording) newSim(shard uint32) (replay.TableSim, error) {
	return broadside.NewSector(rec.cfg, int(shard))
}

// newYieldingSim is newSim for the background verification: its sectors
// give the browser a turn between ticks (yieldCPU), since Verify's
// workers otherwise compute without a pause.
func (rec *Recording) newYieldingSim(shard uint32) (replay.TableSim, error) {
	s, err := broadside.NewSector(rec.cfg, int(shard))
	if err != nil {
		return nil, err
	}
	return yieldingSector{s}, nil
}

// yieldingSector is a sector that calls yieldCPU before each step.
type yieldingSector struct{ *broadside.Sector }

// Step implements replay.Sim.
func (s yieldingSector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	yieldCPU()
	return s.Sector.Step(tick, cmds, rec)
}

// runVerify re-simulates the recording and records the outcome.
func (rec *Recording) runVerify(ctx context.Context) {
	defer close(rec.done)
	last := rec.r.LastTick()
	res, err := bsr.Verify(ctx, rec.r, rec.newYieldingSim, func(tick uint64) {
		yieldCPU()
		rec.mu.Lock()
		if rec.verify.State == VerifyRunning {
			rec.verify.Detail = fmt.Sprintf("tick %d of %d", tick, last)
		}
		rec.mu.Unlock()
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		rec.verify = Verification{State: VerifyNone, Detail: "verification stopped"}
	case err != nil:
		rec.verify = Verification{State: VerifyFailed, Detail: "could not verify: " + err.Error()}
	case !res.OK:
		d := fmt.Sprintf("tick %d, sector %d: hash %#x, recorded %#x", res.FirstTick, res.Shard, res.Got, res.Want)
		if res.Entity != "" {
			d += fmt.Sprintf(" (first difference: %s %s)", res.Entity, res.Field)
		}
		rec.verify = Verification{State: VerifyFailed, Detail: d}
	case res.Truncated != "":
		rec.verify = Verification{State: VerifyOK, Detail: "recording truncated: " + res.Truncated}
	default:
		rec.verify = Verification{State: VerifyOK, Detail: fmt.Sprintf("%d ticks", res.Ticks)}
	}
}

// Config returns the recorded world's configuration.
func (rec *Recording) Config() broadside.Config { return rec.cfg }

// Reader returns the recording's reader.
func (rec *Recording) Reader() *bsr.Reader { return rec.r }

// World implements Source.
func (rec *Recording) World() World { return rec.world }

// Ticks implements Source.
func (rec *Recording) Ticks() (first, last uint64) { return rec.r.FirstTick(), rec.r.LastTick() }

// Frame implements Source.
func (rec *Recording) Frame() *Frame { return &rec.frame }

// Seek implements Source.
func (rec *Recording) Seek(tick uint64) error {
	return rec.moved(rec.seeker.Seek(tick))
}

// Step implements Source.
func (rec *Recording) Step() error {
	return rec.moved(rec.seeker.Step())
}

// moved rebuilds the frame after a seek or step (err: the seek's).
func (rec *Recording) moved(err error) error {
	if err != nil {
		if errors.Is(err, bsr.ErrDiverged) {
			rec.mu.Lock()
			rec.diverged = err
			rec.mu.Unlock()
		}
		return err
	}
	f := &rec.frame
	f.Tick = rec.seeker.Tick()
	f.Ships, f.Balls = f.Ships[:0], f.Balls[:0]
	for _, sim := range rec.seeker.Sims() {
		s, ok := sim.(*broadside.Sector)
		if !ok {
			return fmt.Errorf("viewer: shard sim is a %T, not a Broadside sector", sim)
		}
		s.Ships(func(v broadside.ShipView) { f.Ships = append(f.Ships, v) })
		s.Balls(func(v broadside.BallView) { f.Balls = append(f.Balls, v) })
	}
	return nil
}

// Verification implements Source.
func (rec *Recording) Verification() Verification {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.diverged != nil && rec.verify.State != VerifyFailed {
		return Verification{State: VerifyFailed, Detail: rec.diverged.Error()}
	}
	return rec.verify
}

// WaitVerified waits for the background verification to end (or ctx).
func (rec *Recording) WaitVerified(ctx context.Context) (Verification, error) {
	select {
	case <-rec.done:
		return rec.Verification(), nil
	case <-ctx.Done():
		return rec.Verification(), ctx.Err()
	}
}

// Lineage returns the recorded lineage, indexed on first use.
func (rec *Recording) Lineage() (*lineage.Index, error) {
	rec.ixOnce.Do(func() { rec.ix, rec.ixErr = rec.r.Lineage() })
	return rec.ix, rec.ixErr
}

// Why implements Source.
func (rec *Recording) Why(e lineage.EntityID, tick uint64, depth int) (*lineage.WhyResult, error) {
	ix, err := rec.Lineage()
	if err != nil {
		return nil, err
	}
	return ix.Why(lineage.AnyShard, e, tick, depth)
}

// Close implements Source: it stops the verification and closes the file.
func (rec *Recording) Close() error {
	rec.cancel()
	<-rec.done
	return rec.r.Close()
}
