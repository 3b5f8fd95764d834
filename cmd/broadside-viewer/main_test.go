//go:build window && cgo

package main

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hajimehoshi/ebiten/v2"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/demo/viewer"
	"github.com/anoptic/broadside/demo/viewer/ebitenview"
	"github.com/anoptic/broadside/replay/bsr"
)

// The window tests need a display, and so does any binary that links
// Ebitengine (it opens the display when initialised, and panics without
// one), hence the build tag: scripts/viewer-test.sh (make viewer) runs
// them with -tags window, under Xvfb when DISPLAY is unset.
//
// RunGame must run on the main goroutine, once per process, so TestMain
// runs the game and the tests run beside it, acting on the model through
// game.Do and reading frames back with game.Screenshot.
var (
	game *ebitenview.Game
	src  *viewer.MatchSource
)

// Window size of the tests (Xvfb's screen is larger).
const winW, winH = 1280, 760

// shotsDir is where the tests save their screenshots: $BROADSIDE_VIEWER_SHOTS
// if set (scripts/viewer-test.sh --docs sets it to docs/), else a
// temporary directory.
func shotsDir(t *testing.T) string {
	if d := os.Getenv("BROADSIDE_VIEWER_SHOTS"); d != "" {
		return d
	}
	return t.TempDir()
}

// TestMain plays a bot match in memory, records it as a .bsr file and
// opens the window on the recording (the match stays the ground truth).
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx := context.Background()
	var err error
	src, err = viewer.PlayMatch(ctx, viewer.MatchOptions{Seed: 3, Ships: 32, Ticks: 900})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "broadside-viewer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "match-seed3.bsr")
	if _, err := src.WriteRecording(ctx, path, bsr.SnapshotPolicy{}); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		return 1
	}
	rec, err := viewer.OpenRecording(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rec.Close()
	if v, err := rec.WaitVerified(ctx); err != nil || v.State != viewer.VerifyOK {
		fmt.Fprintf(os.Stderr, "the test recording does not verify: %+v %v\n", v, err)
		return 1
	}
	game = ebitenview.New(viewer.NewModel(rec, winW, winH))
	ebiten.SetWindowSize(winW, winH)
	ebiten.SetWindowTitle("broadside-viewer test")
	code := 1
	go func() {
		defer game.Stop()
		code = m.Run()
	}()
	if err := ebiten.RunGame(game); err != nil {
		fmt.Fprintln(os.Stderr, "RunGame:", err)
		return 1
	}
	return code
}

// shot waits for a frame drawn after everything done so far, and saves it
// as name in the screenshots directory.
func shot(t *testing.T, name string) ebitenview.Shot {
	t.Helper()
	return shotIn(t, shotsDir(t), name)
}

func shotIn(t *testing.T, dir, name string) ebitenview.Shot {
	t.Helper()
	t.Helper()
	game.Do(func(*viewer.Model) {}) // the next Draw follows this Update
	s := game.Screenshot()
	if s.Image == nil {
		t.Fatal("the game stopped")
	}
	path := filepath.Join(dir, name)
	if err := savePNG(path, s.Image); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%dx%d)", path, s.Image.Bounds().Dx(), s.Image.Bounds().Dy())
	return s
}

func near(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) bool { return int(x)-int(y) <= tol && int(y)-int(x) <= tol }
	return d(a.R, b.R) && d(a.G, b.G) && d(a.B, b.B)
}

func at(img *image.RGBA, p viewer.Point) color.RGBA {
	return img.RGBAAt(int(math.Floor(p.X)), int(math.Floor(p.Y)))
}

// countIn returns the share of pixels of r whose colour is near c.
func shareIn(img *image.RGBA, r viewer.Rect, c color.RGBA) float64 {
	n, hit := 0, 0
	for y := int(r.Y); y < int(r.Y+r.H); y++ {
		for x := int(r.X); x < int(r.X+r.W); x++ {
			n++
			if near(img.RGBAAt(x, y), c, 2) {
				hit++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(hit) / float64(n)
}

// visibleShips returns the ships of the scene's frame drawn alone: at
// least minGap pixels from other ships and balls, inside the viewport and
// clear of the panel.
func visibleShips(m *viewer.Model, sc *viewer.Scene, minGap float64) []broadside.ShipView {
	f := m.Source().Frame()
	vp := sc.Camera.Viewport
	panel := m.PanelRect()
	var out []broadside.ShipView
	for _, v := range f.Ships {
		p := screenPos(sc, v)
		if !vp.Contains(p) || panel.Contains(p) || p.Y < vp.Y+40 {
			continue
		}
		alone := true
		for _, o := range f.Ships {
			q := screenPos(sc, o)
			if o.ID != v.ID && math.Hypot(p.X-q.X, p.Y-q.Y) < minGap {
				alone = false
			}
		}
		for _, b := range f.Balls {
			bx, by := b.Meters()
			q := sc.Camera.WorldToScreen(viewer.Point{X: bx, Y: by})
			if math.Hypot(p.X-q.X, p.Y-q.Y) < 8 {
				alone = false
			}
		}
		if alone {
			out = append(out, v)
		}
	}
	return out
}

// screenPos returns where ship v's centre is drawn in scene sc.
func screenPos(sc *viewer.Scene, v broadside.ShipView) viewer.Point {
	x, y := v.Meters()
	return sc.Camera.WorldToScreen(viewer.Point{X: x, Y: y})
}

func TestWindowShowsTheMatch(t *testing.T) {
	start := time.Now()
	var ships []broadside.ShipView
	var m *viewer.Model
	game.Do(func(mm *viewer.Model) {
		m = mm
		m.Select(0)
		m.Key(viewer.KeyFit)
		m.Key(viewer.KeyZoomIn)
		m.Key(viewer.KeyZoomIn)
		m.SeekTo(420)
	})
	s := shot(t, "viewer-match.png")
	img, sc := s.Image, s.Scene
	if b := img.Bounds(); b.Dx() != sc.Width || b.Dy() != sc.Height {
		t.Fatalf("screen %v but scene %dx%d", b, sc.Width, sc.Height)
	}
	var tl viewer.Rect
	var x200, x800 float64
	game.Do(func(*viewer.Model) {
		ships = visibleShips(m, sc, 24)
		tl, x200, x800 = m.TimelineRect(), m.XOfTick(200), m.XOfTick(800)
	})
	if len(ships) < 5 {
		t.Fatalf("only %d ships drawn apart from the others", len(ships))
	}
	for _, v := range ships {
		p := screenPos(sc, v)
		want := viewer.TeamColor(v.Player)
		if v.Sunk {
			want = viewer.ColorSunk
		}
		if got := at(img, p); !near(got, want, 2) {
			t.Errorf("%s at tick 420: the pixel at (%.0f, %.0f) is %v, want %v", viewer.EntityName(v.ID), p.X, p.Y, got, want)
		}
	}
	// The open sea, the timeline's played part and the status bar.
	if got := at(img, viewer.Point{X: x200, Y: tl.Y + tl.H/2}); !near(got, viewer.ColorPlayed, 2) {
		t.Errorf("timeline before the knob is %v, want %v", got, viewer.ColorPlayed)
	}
	if got := at(img, viewer.Point{X: x800, Y: tl.Y + tl.H/2}); !near(got, viewer.ColorTrack, 2) {
		t.Errorf("timeline after the knob is %v, want %v", got, viewer.ColorTrack)
	}
	if share := shareIn(img, viewer.Rect{X: 0, Y: 0, W: float64(sc.Width), H: 22}, viewer.ColorBar); share < 0.5 {
		t.Errorf("status bar only %.0f%% bar colour", 100*share)
	}
	t.Logf("%d ships checked by pixel in %v", len(ships), time.Since(start))
}

// A sunk ship selected: the lineage panel is drawn, says who sank it, and
// the killer is ringed.
func TestWindowWhyPanel(t *testing.T) {
	var sinking viewer.Sinking
	for _, s := range src.Sinkings() {
		if s.Tick > 300 {
			sinking = s
			break
		}
	}
	if sinking.Tick == 0 {
		t.Fatal("no sinking after tick 300")
	}
	ship := broadside.ShipID(sinking.Player)
	var m *viewer.Model
	var clickAt viewer.Point
	game.Do(func(mm *viewer.Model) {
		m = mm
		m.Select(0)
		m.Key(viewer.KeyFit)
		m.SeekTo(sinking.Tick + 4)
		v, _ := m.Source().Frame().Ship(ship)
		clickAt = m.ShipScreenPos(v)
		if !m.Camera().Viewport.Contains(clickAt) {
			t.Errorf("%s drawn at %v, off the viewport", viewer.EntityName(ship), clickAt)
		}
	})
	// Click it the way the mouse does: press and release on the sea.
	game.Do(func(m *viewer.Model) { m.MouseDown(clickAt) })
	game.Do(func(m *viewer.Model) { m.MouseUp(clickAt) })
	var x *viewer.Explanation
	game.Do(func(m *viewer.Model) {
		if m.Selected() != ship {
			t.Errorf("click at %v selected %s, want %s", clickAt, viewer.EntityName(m.Selected()), viewer.EntityName(ship))
		}
		var err error
		if x, err = m.Explanation(); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		return
	}
	s := shot(t, "viewer-why.png")
	img, sc := s.Image, s.Scene
	panelShape, ok := sc.Find(viewer.RolePanel, 0)
	if !ok {
		t.Fatal("no panel")
	}
	panel := panelShape.Rect
	bg := shareIn(img, panel, viewer.ColorPanel)
	ink := 0.0
	for _, c := range []color.RGBA{viewer.ColorTitle, viewer.ColorText, viewer.ColorAlert, viewer.ColorHeading, viewer.ColorChainText} {
		ink += shareIn(img, panel, c)
	}
	if bg < 0.5 || ink < 0.01 {
		t.Fatalf("panel %v: %.0f%% background, %.1f%% text pixels", panel, 100*bg, 100*ink)
	}
	texts := strings.Join(sc.Texts(panel), "\n")
	for _, want := range []string{"Why is " + viewer.EntityName(ship), "SUNK at tick", "SANK IT", fmt.Sprintf("player %d", x.SunkBy[0].Player)} {
		if !strings.Contains(texts, want) {
			t.Errorf("panel lacks %q", want)
		}
	}
	// The selected ship is drawn sunk (grey) at its position, ringed.
	var v broadside.ShipView
	game.Do(func(m *viewer.Model) { v, _ = m.Source().Frame().Ship(ship) })
	p := screenPos(sc, v)
	if got := at(img, p); !near(got, viewer.ColorSunk, 2) {
		t.Errorf("selected sunk ship's pixel %v, want %v", got, viewer.ColorSunk)
	}
	if sel, ok := sc.Find(viewer.RoleSelection, ship); !ok || !ringDrawn(img, sc, sel, viewer.ColorSelection) {
		t.Error("no selection ring drawn")
	}
	// The killer (if still in the sea and in view) is ringed in red.
	killer := x.Hits[0].Shooter
	if ring, ok := sc.Find(viewer.RoleKiller, killer); ok {
		if q := sc.Camera.WorldToScreen(ring.Center); sc.Camera.Viewport.Contains(q) && !panel.Contains(q) && !ringDrawn(img, sc, ring, viewer.ColorKiller) {
			t.Errorf("killer %s not ringed on screen", viewer.EntityName(killer))
		}
	}
}

// ringDrawn reports whether some pixel on ring's circle has colour c.
func ringDrawn(img *image.RGBA, sc *viewer.Scene, ring viewer.Shape, c color.RGBA) bool {
	ctr := sc.Camera.WorldToScreen(ring.Center)
	r := ring.Radius * sc.Camera.Zoom
	for a := 0.0; a < 2*math.Pi; a += 0.05 {
		if near(at(img, viewer.Point{X: ctr.X + r*math.Cos(a), Y: ctr.Y + r*math.Sin(a)}), c, 30) {
			return true
		}
	}
	return false
}

func TestWindowHelpOverlay(t *testing.T) {
	game.Do(func(m *viewer.Model) {
		if !m.HelpShown() {
			m.Key(viewer.KeyHelp)
		}
	})
	s := shotIn(t, t.TempDir(), "viewer-help.png") // not one of the docs' pictures
	help, ok := s.Scene.Find(viewer.RoleHelp, 0)
	if !ok {
		t.Fatal("no help overlay")
	}
	if share := shareIn(s.Image, help.Rect, viewer.ColorHelp); share < 0.5 {
		t.Fatalf("help box only %.0f%% its colour", 100*share)
	}
	if ink := shareIn(s.Image, help.Rect, viewer.ColorHeading); ink < 0.005 {
		t.Fatalf("help box has %.2f%% key-name pixels", 100*ink)
	}
	game.Do(func(m *viewer.Model) { m.Key(viewer.KeyEscape) })
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--demo"}, true},
		{[]string{"match.bsr"}, true},
		{[]string{"--live", "127.0.0.1:4433"}, true},
		{[]string{}, false},
		{[]string{"--demo", "x.bsr"}, false},
		{[]string{"a.bsr", "b.bsr"}, false},
		{[]string{"--demo", "--speed", "32"}, false},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.args, err, tc.ok)
		}
	}
}
