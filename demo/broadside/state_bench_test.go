package broadside

import (
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
