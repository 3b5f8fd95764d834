package viewer

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

var (
	matchOnce sync.Once
	match     *MatchSource
	matchErr  error
)

// testMatch is one bot match shared by the tests (frames are read-only;
// each test gets its own cursor through a copy).
func testMatch(t *testing.T) *MatchSource {
	t.Helper()
	matchOnce.Do(func() {
		match, matchErr = PlayMatch(context.Background(), MatchOptions{Seed: 3, Ships: 32, Ticks: 900})
	})
	if matchErr != nil {
		t.Fatal(matchErr)
	}
	c := *match
	c.cur = 0
	return &c
}

const screenW, screenH = 1280, 800

func newTestModel(t *testing.T) (*Model, *MatchSource) {
	src := testMatch(t)
	return NewModel(src, screenW, screenH), src
}

func TestPlaybackSpeeds(t *testing.T) {
	m, _ := newTestModel(t)
	if m.Tick() != 1 || m.Playing() || m.Speed() != 1 {
		t.Fatalf("start: tick %d playing %v speed %g; want 1, paused, 1x", m.Tick(), m.Playing(), m.Speed())
	}
	m.Update(1)
	if m.Tick() != 1 {
		t.Fatalf("paused viewer moved to tick %d", m.Tick())
	}
	m.Key(KeyPlayPause)
	for i := 0; i < 60; i++ {
		m.Update(1.0 / 60)
	}
	if m.Tick() < 30 || m.Tick() > 32 {
		t.Fatalf("1 s at 1x: tick %d, want 31 (±1)", m.Tick())
	}
	for i := 0; i < 10; i++ {
		m.Key(KeyFaster)
	}
	if m.Speed() != 16 {
		t.Fatalf("fastest speed %g, want 16", m.Speed())
	}
	before := m.Tick()
	for i := 0; i < 30; i++ {
		m.Update(1.0 / 60)
	}
	if got := m.Tick() - before; got < 238 || got > 242 {
		t.Fatalf("0.5 s at 16x: %d ticks, want 240", got)
	}
	for i := 0; i < 10; i++ {
		m.Key(KeySlower)
	}
	if m.Speed() != 0.25 {
		t.Fatalf("slowest speed %g, want 0.25", m.Speed())
	}
	before = m.Tick()
	for i := 0; i < 120; i++ {
		m.Update(1.0 / 60)
	}
	if got := m.Tick() - before; got < 14 || got > 16 {
		t.Fatalf("2 s at 0.25x: %d ticks, want 15", got)
	}
	// Playing into the end pauses at the last tick; play again restarts.
	_, last := m.Source().Ticks()
	m.SeekTo(last - 3)
	m.Update(1)
	if m.Tick() != last || m.Playing() {
		t.Fatalf("at the end: tick %d playing %v, want %d and paused", m.Tick(), m.Playing(), last)
	}
	m.Key(KeyPlayPause)
	if first, _ := m.Source().Ticks(); m.Tick() != first || !m.Playing() {
		t.Fatalf("play at the end: tick %d playing %v, want %d and playing", m.Tick(), m.Playing(), first)
	}
}

func TestStepAndSeek(t *testing.T) {
	m, src := newTestModel(t)
	first, last := src.Ticks()
	m.Key(KeyPlayPause)
	m.Key(KeyStepForward)
	if m.Playing() || m.Tick() != first+1 {
		t.Fatalf("step: tick %d playing %v", m.Tick(), m.Playing())
	}
	m.Key(KeySecondForward)
	if m.Tick() != first+1+broadside.TickRate {
		t.Fatalf("a second forward: tick %d", m.Tick())
	}
	m.Key(KeyStepBack)
	m.Key(KeyStepBack)
	if m.Tick() != first+broadside.TickRate-1 {
		t.Fatalf("two back: tick %d", m.Tick())
	}
	m.Key(KeyLast)
	if m.Tick() != last {
		t.Fatalf("End: tick %d", m.Tick())
	}
	m.Key(KeyStepForward) // clamped
	if m.Tick() != last || m.Err() != nil {
		t.Fatalf("step past the end: tick %d err %v", m.Tick(), m.Err())
	}
	m.Key(KeyFirst)
	m.Key(KeySecondBack)
	if m.Tick() != first {
		t.Fatalf("before the start: tick %d", m.Tick())
	}
	// The frame shown is the recorded frame of the tick.
	m.SeekTo(500)
	if f := m.Source().Frame(); f.Tick != 500 || len(f.Ships) == 0 {
		t.Fatalf("seek 500: frame tick %d, %d ships", f.Tick, len(f.Ships))
	}
}

func TestTimelineDrag(t *testing.T) {
	m, src := newTestModel(t)
	first, last := src.Ticks()
	tl := m.TimelineRect()
	y := tl.Y + tl.H/2
	x0, x1 := m.XOfTick(first), m.XOfTick(last)
	mid := (x0 + x1) / 2
	m.MouseDown(Point{mid, y})
	want := first + (last-first)/2
	if d := int64(m.Tick()) - int64(want); d < -1 || d > 1 {
		t.Fatalf("press mid-timeline: tick %d, want %d", m.Tick(), want)
	}
	for _, x := range []float64{x0 + 10, x1 - 10, x1 + 300, x0 - 300} {
		m.MouseMove(Point{x, y + 200}) // dragging off the bar keeps seeking
		if got, want := m.Tick(), m.TickAtX(x); got != want {
			t.Fatalf("drag to x %.0f: tick %d, want %d", x, got, want)
		}
	}
	if m.Tick() != first {
		t.Fatalf("dragged before the start: tick %d", m.Tick())
	}
	m.MouseUp(Point{x0 - 300, y + 200})
	m.MouseMove(Point{x1, y})
	if m.Tick() != first {
		t.Fatalf("moving after release seeked to %d", m.Tick())
	}
	for _, tick := range []uint64{first, 123, 456, last} {
		if got := m.TickAtX(m.XOfTick(tick)); got != tick {
			t.Fatalf("TickAtX(XOfTick(%d)) = %d", tick, got)
		}
	}
}

// isolatedShip returns an afloat ship of the frame at least 80 px from any
// other ship on screen and inside the viewport, left of the panel.
func isolatedShip(t *testing.T, m *Model) broadside.ShipView {
	t.Helper()
	f := m.Source().Frame()
	vp := m.Camera().Viewport
	vp.W -= m.PanelRect().W
	for _, v := range f.Ships {
		p := m.ShipScreenPos(v)
		if v.Sunk || !vp.Contains(p) {
			continue
		}
		alone := true
		for _, o := range f.Ships {
			q := m.ShipScreenPos(o)
			if o.ID != v.ID && math.Hypot(p.X-q.X, p.Y-q.Y) < 80 {
				alone = false
			}
		}
		if alone {
			return v
		}
	}
	t.Fatalf("no isolated ship at tick %d", f.Tick)
	return broadside.ShipView{}
}

func TestSelectByClick(t *testing.T) {
	m, _ := newTestModel(t)
	m.SeekTo(300)
	v := isolatedShip(t, m)
	p := m.ShipScreenPos(v)
	m.Click(Point{p.X + 3, p.Y - 2})
	if m.Selected() != v.ID {
		t.Fatalf("click on %s selected %s", EntityName(v.ID), EntityName(m.Selected()))
	}
	if m.PanelRect().W == 0 {
		t.Fatal("no panel for the selection")
	}
	// The camera refits to the space the panel leaves; the ship moves.
	p = m.ShipScreenPos(v)
	// A drag on the sea pans and keeps the selection.
	cam := m.Camera()
	m.MouseDown(Point{p.X + 40, p.Y + 40})
	m.MouseMove(Point{p.X + 90, p.Y + 40})
	m.MouseUp(Point{p.X + 90, p.Y + 40})
	if m.Selected() != v.ID {
		t.Fatal("a drag changed the selection")
	}
	if got := m.Camera().Center; math.Abs((cam.Center.X-got.X)*cam.Zoom-50) > 1e-6 || got.Y != cam.Center.Y {
		t.Fatalf("drag 50 px right moved the camera from %v to %v", cam.Center, got)
	}
	// A click on open sea deselects; Esc too.
	m.Select(v.ID)
	m.Click(Point{1, m.Camera().Viewport.Y + 1})
	if m.Selected() != 0 {
		t.Fatalf("click on open sea kept %s", EntityName(m.Selected()))
	}
	m.Select(v.ID)
	m.Key(KeyEscape)
	if m.Selected() != 0 {
		t.Fatal("Esc kept the selection")
	}
}

// pointInPolygon reports whether p is inside the convex or simple polygon.
func pointInPolygon(p Point, poly []Point) bool {
	in := false
	for i, j := 0, len(poly)-1; i < len(poly); j, i = i, i+1 {
		a, b := poly[i], poly[j]
		if (a.Y > p.Y) != (b.Y > p.Y) && p.X < (b.X-a.X)*(p.Y-a.Y)/(b.Y-a.Y)+a.X {
			in = !in
		}
	}
	return in
}

func TestSceneDrawsTheFrame(t *testing.T) {
	m, src := newTestModel(t)
	sk := src.Sinkings()
	m.SeekTo(sk[0].Tick + 2)
	s := m.Scene()
	f := m.Source().Frame()
	if got := s.Count(RoleShip); got != len(f.Ships) {
		t.Fatalf("%d ship shapes for %d ships", got, len(f.Ships))
	}
	if got := s.Count(RoleBall); got != len(f.Balls) {
		t.Fatalf("%d ball shapes for %d balls", got, len(f.Balls))
	}
	if got := s.Count(RoleIsland); got != len(src.World().Islands) {
		t.Fatalf("%d island shapes for %d islands", got, len(src.World().Islands))
	}
	sunkSeen := false
	for _, v := range f.Ships {
		sh, ok := s.Find(RoleShip, v.ID)
		if !ok {
			t.Fatalf("%s not drawn", EntityName(v.ID))
		}
		want := TeamColor(v.Player)
		if v.Sunk {
			want, sunkSeen = ColorSunk, true
		}
		if sh.Color != want {
			t.Fatalf("%s drawn in %v, want %v", EntityName(v.ID), sh.Color, want)
		}
		x, y := v.Meters()
		if !pointInPolygon(Point{x, y}, sh.Points) {
			t.Fatalf("%s at (%.0f, %.0f) outside its hull %v", EntityName(v.ID), x, y, sh.Points)
		}
		// The bow points along the heading.
		bow := sh.Points[0]
		if d := math.Remainder(math.Atan2(bow.Y-y, bow.X-x)-v.HeadingRadians(), 2*math.Pi); math.Abs(d) > 1e-9 {
			t.Fatalf("%s bow off its heading by %g rad", EntityName(v.ID), d)
		}
	}
	if !sunkSeen {
		t.Fatalf("no sunk ship at tick %d right after a sinking", f.Tick)
	}
	if s.Count(RoleWarning) != 0 || s.Count(RolePanel) != 0 || s.Count(RoleHelp) != 0 {
		t.Fatal("warning, panel or help shown unasked")
	}
	if s.Count(RoleTimelineKnob) != 1 || s.Count(RolePlayButton) == 0 {
		t.Fatal("no timeline")
	}
}

func TestCamera(t *testing.T) {
	c := Camera{Viewport: Rect{0, 22, 1000, 700}}
	c.Fit(2400, 2400)
	if got := c.WorldToScreen(Point{1200, 1200}); math.Abs(got.X-500) > 1e-9 || math.Abs(got.Y-372) > 1e-9 {
		t.Fatalf("world centre drawn at %v", got)
	}
	// North up: a point north of the centre is drawn above it.
	if c.WorldToScreen(Point{1200, 1300}).Y >= 372 {
		t.Fatal("north is not up")
	}
	for _, p := range []Point{{0, 0}, {2400, 2400}, {17, 2300}} {
		q := c.ScreenToWorld(c.WorldToScreen(p))
		if math.Hypot(p.X-q.X, p.Y-q.Y) > 1e-9 {
			t.Fatalf("round trip of %v gave %v", p, q)
		}
	}
	at := Point{300, 200}
	w := c.ScreenToWorld(at)
	c.ZoomAt(at, 2.5)
	if q := c.WorldToScreen(w); math.Hypot(q.X-at.X, q.Y-at.Y) > 1e-9 {
		t.Fatalf("zoom moved the point under the cursor to %v", q)
	}
}

// sinkingAt finds a sinking whose ship is still sunk (not respawned) a
// few ticks later, and whose killer is in the sea then.
func sinkingAt(t *testing.T, src *MatchSource) Sinking {
	t.Helper()
	for _, s := range src.Sinkings() {
		if s.Tick > 100 {
			return s
		}
	}
	t.Fatal("no sinking after tick 100")
	return Sinking{}
}

func TestWhyOfASunkShip(t *testing.T) {
	m, src := newTestModel(t)
	s := sinkingAt(t, src)
	at := s.Tick + 5
	m.SeekTo(at)
	ship := broadside.ShipID(s.Player)
	m.Select(ship)
	x, err := m.Explanation()
	if err != nil {
		t.Fatal(err)
	}
	if !x.Sunk || x.SunkAt != s.Tick || !x.Exact {
		t.Fatalf("sunk %v at %d (exact %v), want sunk at %d exactly", x.Sunk, x.SunkAt, x.Exact, s.Tick)
	}
	// Check the killing blow against the frames: the ball that hit was in
	// flight the tick before, fired by the shooter the lineage names
	// (unless it was fired point-blank, and hit, within the tick).
	kill := x.Hits[0]
	if err := src.Seek(s.Tick - 1); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range src.Frame().Balls {
		if b.ID == kill.Ball {
			found = true
			if b.Owner != kill.Shooter {
				t.Fatalf("killing ball %s owned by %s; lineage says %s", EntityName(b.ID), EntityName(b.Owner), EntityName(kill.Shooter))
			}
		}
	}
	if !found && kill.Fired < s.Tick {
		t.Fatalf("killing ball %s, fired at tick %d, not in flight at tick %d", EntityName(kill.Ball), kill.Fired, s.Tick-1)
	}
	if !kill.HasFireOrder || kill.FireOrder.Player != ShipPlayer(kill.Shooter) || kill.FireOrder.KindName != "fire" {
		t.Fatalf("killing blow's fire order %+v (found %v)", kill.FireOrder, kill.HasFireOrder)
	}
	if len(x.SunkBy) == 0 || !x.SunkBy[0].Killer || x.SunkBy[0].Player != kill.Player {
		t.Fatalf("sunk by %+v, want player %d first", x.SunkBy, kill.Player)
	}
	// Every hit counted in SunkBy is in the ship's last run afloat, and
	// the hull lost matches: each hit takes MinDamage..MaxDamage.
	hits := 0
	for _, p := range x.SunkBy {
		hits += p.Hits
	}
	if hits*broadside.MinDamage > broadside.MaxHull || hits*broadside.MaxDamage < broadside.MaxHull {
		t.Fatalf("%d hits cannot sink a %d hull", hits, broadside.MaxHull)
	}
	// The scene: the panel says who sank it, the killer is ringed.
	if err := src.Seek(at); err != nil {
		t.Fatal(err)
	}
	sc := m.Scene()
	if sc.Count(RolePanel) != 1 || sc.Count(RoleSelection) != 1 {
		t.Fatal("no panel or selection ring")
	}
	texts := strings.Join(sc.Texts(m.PanelRect()), "\n")
	for _, want := range []string{"Why is " + EntityName(ship), "SUNK at tick", "SANK IT", "Commands, nearest first", "Chain:"} {
		if !strings.Contains(texts, want) {
			t.Fatalf("panel lacks %q:\n%s", want, texts)
		}
	}
	if _, ok := m.Source().Frame().Ship(kill.Shooter); ok {
		if _, ok := sc.Find(RoleKiller, kill.Shooter); !ok {
			t.Fatalf("killer %s not highlighted", EntityName(kill.Shooter))
		}
	}
	// Every command listed belongs to the walk's answer.
	all := x.Result.Causes(0)
	for _, c := range x.Causes {
		if !slices.ContainsFunc(all, func(o lineage.Cause) bool { return o.Pos == c.Pos }) {
			t.Fatalf("cause at %d not in the answer", c.Pos)
		}
	}
}

// estimating hides MatchSource's exact AfloatSince.
type estimating struct{ Source }

func TestSunkByEstimateIsWithinTheExactAnswer(t *testing.T) {
	_, src := newTestModel(t)
	checked := 0
	for _, s := range src.Sinkings() {
		if err := src.Seek(s.Tick); err != nil {
			t.Fatal(err)
		}
		v, _ := src.Frame().Ship(broadside.ShipID(s.Player))
		r, err := src.Why(v.ID, s.Tick, WhyDepth)
		if err != nil {
			t.Fatal(err)
		}
		exact, est := Explain(r, v, src), Explain(r, v, estimating{src})
		total := func(x *Explanation) (n int) {
			for _, p := range x.SunkBy {
				n += p.Hits
			}
			return n
		}
		if !exact.Exact || est.Exact || total(est) > total(exact) {
			t.Fatalf("sinking %+v: estimate counts %d hits from tick %d, exact %d from %d", s, total(est), est.AfloatSince, total(exact), exact.AfloatSince)
		}
		if est.SunkBy[0] != exact.SunkBy[0] && est.SunkBy[0].Player != exact.SunkBy[0].Player {
			t.Fatalf("sinking %+v: killer %+v estimated, %+v exact", s, est.SunkBy[0], exact.SunkBy[0])
		}
		checked++
	}
	if checked < 3 {
		t.Fatalf("only %d sinkings", checked)
	}
}

// failing reports a failed verification.
type failing struct{ Source }

func (failing) Verification() Verification {
	return Verification{State: VerifyFailed, Detail: "tick 412 sector 2: hash 0x1 != recorded 0x2"}
}

func TestWarningBand(t *testing.T) {
	src := testMatch(t)
	m := NewModel(failing{src}, screenW, screenH)
	m.Select(broadside.ShipID(1))
	s := m.Scene()
	band, ok := s.Find(RoleWarning, 0)
	if !ok {
		t.Fatal("no warning band for a recording that does not verify")
	}
	if !strings.Contains(strings.Join(s.Texts(band.Rect), " "), "tick 412 sector 2") {
		t.Fatal("the band does not say what failed")
	}
	if p := m.PanelRect(); p.Y < band.Rect.Y+band.Rect.H {
		t.Fatal("the panel covers the warning band")
	}
	m2 := NewModel(src, screenW, screenH)
	if m2.Scene().Count(RoleWarning) != 0 {
		t.Fatal("warning band for a source with nothing to verify")
	}
}

func TestHelpOverlay(t *testing.T) {
	m, _ := newTestModel(t)
	m.Key(KeyHelp)
	s := m.Scene()
	help, ok := s.Find(RoleHelp, 0)
	if !ok || !m.HelpShown() {
		t.Fatal("H shows no help")
	}
	texts := strings.Join(s.Texts(help.Rect), "\n")
	for _, sc := range Shortcuts {
		if !strings.Contains(texts, sc.Keys) || !strings.Contains(texts, sc.Action) {
			t.Fatalf("help lacks %q %q:\n%s", sc.Keys, sc.Action, texts)
		}
	}
	m.Select(broadside.ShipID(1))
	m.Key(KeyEscape)
	if m.HelpShown() || m.Selected() == 0 {
		t.Fatal("Esc should close the help first, keeping the selection")
	}
	m.Key(KeyHelp)
	m.Click(Point{5, 100})
	if m.HelpShown() || m.Selected() == 0 {
		t.Fatal("a click should only close the help")
	}
}

// TestFollowShip: C keeps the selected ship in the middle of the free sea
// as it sails; a pan stops following, so do Esc and F.
func TestFollowShip(t *testing.T) {
	m, _ := newTestModel(t)
	m.SeekTo(300)
	v := isolatedShip(t, m)
	m.Key(KeyFollow)
	if m.FollowingShip() {
		t.Fatal("C with no selection follows")
	}
	m.Select(v.ID)
	m.Key(KeyZoomIn)
	m.Key(KeyFollow)
	if !m.FollowingShip() {
		t.Fatal("C did not follow the selected ship")
	}
	vp := m.Camera().Viewport
	want := Point{vp.X + (vp.W-m.PanelRect().W)/2, vp.Y + vp.H/2}
	moved := 0.0
	for i := 0; i < 60; i++ {
		before, _ := m.Source().Frame().Ship(v.ID)
		m.Key(KeyStepForward)
		m.Scene()
		now, ok := m.Source().Frame().Ship(v.ID)
		if !ok {
			continue
		}
		bx, by := before.Meters()
		nx, ny := now.Meters()
		moved += math.Hypot(nx-bx, ny-by)
		if p := m.ShipScreenPos(now); math.Hypot(p.X-want.X, p.Y-want.Y) > 1e-6 {
			t.Fatalf("tick %d: followed ship drawn at %v, want %v", m.Tick(), p, want)
		}
	}
	if moved < 10 {
		t.Fatalf("the ship moved only %.1f m: nothing was followed", moved)
	}
	m.Key(KeyPanLeft)
	if m.FollowingShip() {
		t.Fatal("a pan kept following")
	}
	m.Key(KeyFollow)
	m.Key(KeyFit)
	if m.FollowingShip() {
		t.Fatal("F kept following")
	}
	m.Key(KeyFollow)
	m.Key(KeyEscape)
	if m.FollowingShip() || m.Selected() != 0 {
		t.Fatal("Esc kept following")
	}
}
