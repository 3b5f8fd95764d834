package broadside

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// botTape is a bot's state updates in the world 'broadside serve' runs by
// default (a 4,000 m sea in 2 × 2 sectors) with 300 bot ships, warmed up
// past the first volleys, as viewer 7 gets them through the default
// interest (600 m cells): tick k against tick k-3, the first one full.
// It returns the frames viewer 7 sees (what a client must rebuild) and
// the updates.
func botTape(tb testing.TB, ticks int) (views []*Frame, payloads [][]byte, bases []uint64) {
	tb.Helper()
	cfg := Config{Seed: 1, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 12}
	w := newBotWorld(tb, cfg, 300, 1, 0)
	for range 200 {
		w.step(tb, nil)
	}
	var frames []*Frame
	var enc StateEncoder
	for k := range ticks {
		w.step(tb, nil)
		f := NewFrame(w.Tick())
		for _, s := range w.Sectors() {
			f.AddSector(s)
		}
		var prev *Frame
		if len(frames) > 0 {
			prev = frames[len(frames)-1]
		}
		f.Seal(prev, DefaultInterestRadius)
		frames = append(frames, f)
		var base *Frame
		if k >= 3 {
			base = frames[k-3]
		}
		payloads = append(payloads, enc.Encode(nil, f, base, 7))
		views = append(views, f.View(7))
		if base != nil {
			bases = append(bases, base.Tick)
		} else {
			bases = append(bases, 0)
		}
	}
	return views, payloads, bases
}

// BenchmarkBotUpdates: a bot's tracker (Reuse, as demo/bots runs it)
// applying the updates of botTape, one update per op; the ticks go on
// from round to round (the tape's ticks shifted; each round starts with
// its 3 full updates), so the tracker's ring cycles as a bot's does.
func BenchmarkBotUpdates(b *testing.B) {
	views, payloads, bases := botTape(b, 64)
	var ships, balls, bytes int
	for k, v := range views {
		if k > 0 {
			ships, balls, bytes = ships+len(v.Ships), balls+len(v.Balls), bytes+len(payloads[k])
		}
	}
	n := float64(len(views) - 1)
	tr := StateTracker{Reuse: true}
	b.ReportAllocs()
	b.ResetTimer()
	round, k := uint64(0), 0
	for b.Loop() {
		if k == len(payloads) {
			round, k = round+1, 0
		}
		shift := round * 1000
		tick, base := views[k].Tick+shift, bases[k]
		if base != 0 {
			base += shift
		}
		if _, err := tr.Apply(tick, base, payloads[k]); err != nil {
			b.Fatal(err)
		}
		k++
	}
	b.ReportMetric(float64(ships)/n, "ships/view")
	b.ReportMetric(float64(balls)/n, "balls/view")
	b.ReportMetric(float64(bytes)/n, "bytes/update")
}

// TestBotTapeRebuildsViews: a bot's reusing tracker, fed the updates of a
// real battle (ships turning, volleys of balls, balls falling), rebuilds at every tick exactly the view a full copy of the
// server's frame gives, and so does the two-pass reference merge.
func TestBotTapeRebuildsViews(t *testing.T) {
	views, payloads, bases := botTape(t, 64)
	tr := StateTracker{Reuse: true}
	var plain StateTracker
	var balls int
	for k, p := range payloads {
		got, err := tr.Apply(views[k].Tick, bases[k], p)
		if err != nil {
			t.Fatalf("tick %d: %v", views[k].Tick, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(views[k])) {
			t.Fatalf("tick %d: the rebuilt view differs from the server's (%d/%d ships, %d/%d balls)",
				views[k].Tick, len(got.Ships), len(views[k].Ships), len(got.Balls), len(views[k].Balls))
		}
		var base *Frame
		if bases[k] != 0 {
			base = views[k-3]
		}
		ref, err := applyDeltaReference(base, views[k].Tick, p, nil, nil)
		if err != nil || !reflect.DeepEqual(normalize(ref), normalize(got)) {
			t.Fatalf("tick %d: the two-pass reference differs (%v)", views[k].Tick, err)
		}
		if _, err := plain.Apply(views[k].Tick, bases[k], p); err != nil {
			t.Fatal(err)
		}
		if base != nil {
			balls += len(got.Balls)
		}
	}
	if balls == 0 {
		t.Fatal("no balls in view: the test does not exercise their merge")
	}
}

// TestTrackerPinnedMatches: a Pinned tracker, given deltas against the
// ticks it pinned (the newest or an older one, as a server that has not
// yet read the newest acknowledgement), malformed updates and late ones,
// rebuilds every view exactly, keeps the pinned frames intact while they
// can be bases, and holds no more than maxPins + 2 frames.
func TestTrackerPinnedMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var frames []*Frame
	var enc StateEncoder
	tr := StateTracker{Pinned: true}
	var pins []*Frame // what the tracker returned for the ticks it pinned
	allocated := map[*Frame]bool{}
	for tick := uint64(1); tick <= 300; tick++ {
		f := randomFrame(r, tick, 60, 400)
		var prev *Frame
		if len(frames) > 0 {
			prev = frames[len(frames)-1]
		}
		f.Seal(prev, 1_500_000)
		frames = append(frames, f)
		// The server's base: one of the last 3 pins, if recent enough.
		var base *Frame
		if n := len(pins); n > 0 {
			b := pins[max(0, n-1-r.IntN(3))]
			if tick-b.Tick <= 15 {
				base = frames[b.Tick-1]
			}
		}
		baseTick := uint64(0)
		if base != nil {
			baseTick = base.Tick
		}
		p := enc.Encode(nil, f, base, 7)
		if r.IntN(10) == 0 {
			if _, err := tr.Apply(tick, baseTick, p[:r.IntN(len(p))]); !errors.Is(err, ErrBadState) {
				t.Fatalf("tick %d: truncated update: %v", tick, err)
			}
		}
		got, err := tr.Apply(tick, baseTick, p)
		if err != nil {
			t.Fatalf("tick %d against %d: %v", tick, baseTick, err)
		}
		allocated[got] = true
		if !reflect.DeepEqual(normalize(got), normalize(f.View(7))) {
			t.Fatalf("tick %d against %d: the rebuilt view differs", tick, baseTick)
		}
		if tick > 5 && r.IntN(8) == 0 {
			// A late update of an older tick: applied, not kept.
			old := frames[tick-4]
			late, err := tr.Apply(old.Tick, 0, enc.Encode(nil, old, nil, 7))
			if err != nil || !reflect.DeepEqual(normalize(late), normalize(old.View(7))) || tr.Latest() != got {
				t.Fatalf("tick %d: late update of tick %d: %v", tick, old.Tick, err)
			}
		}
		if tick%3 == 0 {
			if !tr.Pin(tick) {
				t.Fatalf("tick %d: the latest frame could not be pinned", tick)
			}
			pins = append(pins, got)
		}
		if tr.Pin(tick - 1) {
			t.Fatalf("tick %d: pinned a tick that is not the latest", tick)
		}
		for _, p := range pins {
			if p.Tick+15 >= tick && !reflect.DeepEqual(normalize(p), normalize(frames[p.Tick-1].View(7))) {
				t.Fatalf("tick %d: the pinned frame of tick %d changed", tick, p.Tick)
			}
		}
	}
	if n := len(allocated); n > maxPins+2 {
		t.Fatalf("the tracker built its frames in %d distinct frames, want at most %d", n, maxPins+2)
	}
}
