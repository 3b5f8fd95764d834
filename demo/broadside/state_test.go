package broadside

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestStateDeltaRoundTrip plays a bot battle and checks, for several
// viewers and base distances, that a client applying the encoded delta to
// its view of the base gets exactly its view of the current tick.
func TestStateDeltaRoundTrip(t *testing.T) {
	cfg := Config{Seed: 3, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 2, Islands: 3}
	w := newBotWorld(t, cfg, 40, 3, 0)
	var frames []*Frame
	var enc StateEncoder
	var shared SharedEncoder
	var checked, nbytes, fulls int
	for range 300 {
		w.step(t, nil)
		f := NewFrame(w.Tick())
		for _, s := range w.Sectors() {
			f.AddSector(s)
		}
		var prev *Frame
		if len(frames) > 0 {
			prev = frames[len(frames)-1]
		}
		f.Seal(prev, 300_000)
		frames = append(frames, f)
		if len(frames) < 2 {
			continue
		}
		for _, viewer := range []uint32{0, 1, 7, 23, 40, 999} {
			for _, back := range []int{0, 1, 3, 20} {
				var base, baseView *Frame
				if back > 0 && back < len(frames) {
					base = frames[len(frames)-1-back]
					baseView = base.View(viewer)
				}
				p := enc.Encode(nil, f, base, viewer)
				if sp := shared.Encode(nil, f, base, viewer); !bytes.Equal(sp, p) {
					t.Fatalf("tick %d viewer %d back %d: the shared encoder's update differs", f.Tick, viewer, back)
				}
				got, err := ApplyDelta(baseView, f.Tick, p)
				if err != nil {
					t.Fatalf("tick %d viewer %d base %v: %v", f.Tick, viewer, back, err)
				}
				if ref, err := applyDeltaReference(baseView, f.Tick, p, nil, nil); err != nil || !reflect.DeepEqual(normalize(ref), normalize(got)) {
					t.Fatalf("tick %d viewer %d back %d: the two-pass reference merge differs (%v)", f.Tick, viewer, back, err)
				}
				want := f.View(viewer)
				if !reflect.DeepEqual(normalize(got), normalize(want)) {
					t.Fatalf("tick %d viewer %d back %d: rebuilt frame differs (%d/%d ships, %d/%d balls)",
						f.Tick, viewer, back, len(got.Ships), len(want.Ships), len(got.Balls), len(want.Balls))
				}
				checked++
				if viewer == 7 && back == 1 {
					nbytes += len(p)
				}
				if base == nil {
					fulls++
				}
			}
		}
	}
	if w.BallCount() == 0 {
		t.Fatal("no cannonballs: the test does not exercise balls")
	}
	t.Logf("%d deltas checked (%d full); viewer 7 got %.0f bytes per tick", checked, fulls, float64(nbytes)/299)
}

func normalize(f *Frame) *Frame {
	out := &Frame{Tick: f.Tick, Ships: f.Ships, Balls: f.Balls}
	if len(out.Ships) == 0 {
		out.Ships = nil
	}
	if len(out.Balls) == 0 {
		out.Balls = nil
	}
	return out
}

func TestStateTrackerNeedsBase(t *testing.T) {
	var tr StateTracker
	if _, err := tr.Apply(5, 4, []byte{stateFormat, 0, 0, 0, 0}); !errors.Is(err, ErrBadState) {
		t.Fatalf("update against an unknown base: %v", err)
	}
	if _, err := tr.Apply(5, 0, []byte{stateFormat, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if f := tr.Latest(); f == nil || f.Tick != 5 {
		t.Fatalf("latest %+v", f)
	}
	if _, err := tr.Apply(6, 5, []byte{2}); !errors.Is(err, ErrBadState) {
		t.Fatalf("unknown format: %v", err)
	}
}

func FuzzApplyDelta(f *testing.F) {
	base := &Frame{Tick: 10,
		Ships: []ShipView{{ID: 5, Player: 1, X: 100, Y: -100, Hull: 50, PortReload: 3}, {ID: 9, Player: 2}},
		Balls: []BallView{{ID: 100, Owner: 5, X: 1, Y: 2, VX: 3, VY: 4, Lifetime: 70}}}
	var enc StateEncoder
	cur := &Frame{Tick: 12, Ships: []ShipView{{ID: 5, Player: 1, X: 300, Y: -100, Hull: 40}, {ID: 11, Player: 3, Sunk: true}},
		Balls: []BallView{{ID: 100, Owner: 5, X: 7, Y: 10, VX: 3, VY: 4, Age: 2, Lifetime: 70}, {ID: 101, Owner: 11}}}
	b2 := *base
	b2.Seal(nil, 0)
	cur.Seal(&b2, 0)
	f.Add(true, enc.Encode(nil, cur, &b2, 0))
	f.Add(false, enc.Encode(nil, cur, nil, 0))
	f.Add(true, []byte{1, 1, 5, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, withBase bool, p []byte) {
		var b *Frame
		if withBase {
			b = base
		}
		out, err := ApplyDelta(b, 12, p)
		ref, refErr := applyDeltaReference(b, 12, p, nil, nil)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("one-pass merge: %v; two-pass reference: %v", err, refErr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("error does not wrap ErrBadState: %v", err)
			}
			return
		}
		if !reflect.DeepEqual(normalize(out), normalize(ref)) {
			t.Fatalf("one-pass merge rebuilt %+v, the two-pass reference %+v", out, ref)
		}
		for i := 1; i < len(out.Ships); i++ {
			if out.Ships[i].ID <= out.Ships[i-1].ID {
				t.Fatalf("ships out of order: %v", out.Ships)
			}
		}
		for i := 1; i < len(out.Balls); i++ {
			if out.Balls[i].ID <= out.Balls[i-1].ID {
				t.Fatalf("balls out of order")
			}
		}
	})
}

// TestTrackerKeepsNewerFrameOverLateUpdate: a late update of tick 4 must
// not evict tick 20 (the same slot of the tracker's ring), which the
// client acknowledged and the server bases its next delta on.
func TestTrackerKeepsNewerFrameOverLateUpdate(t *testing.T) {
	frame := func(tick uint64) *Frame {
		f := NewFrame(tick)
		f.Seal(nil, 0)
		return f
	}
	var enc StateEncoder
	f4, f20, f21 := frame(4), frame(20), frame(21)
	var tr StateTracker
	if _, err := tr.Apply(20, 0, enc.Encode(nil, f20, nil, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Apply(4, 0, enc.Encode(nil, f4, nil, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Apply(21, 20, enc.Encode(nil, f21, f20, 0)); err != nil {
		t.Fatalf("delta against tick 20 after a late update of tick 4: %v", err)
	}
	_, err := tr.Apply(22, 9, enc.Encode(nil, frame(22), frame(9), 0))
	if !errors.Is(err, ErrBaseNotHeld) || !strings.Contains(err.Error(), "tick 22 against tick 9") {
		t.Fatalf("delta against a tick never held: %v, want ErrBaseNotHeld naming the ticks", err)
	}
}
