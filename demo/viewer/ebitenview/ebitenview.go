//go:build cgo || js

// Package ebitenview shows a viewer.Model in an Ebitengine window: it draws
// the model's Scenes and feeds keyboard and mouse input back to it. It is
// the only part of the viewer that needs cgo and a display on the desktop;
// in a browser (js/wasm) it draws with WebGL.
package ebitenview

import (
	"image"
	"image/color"
	"sync"

	"github.com/hajimehoshi/ebiten/v2"
	"github.com/hajimehoshi/ebiten/v2/ebitenutil"
	"github.com/hajimehoshi/ebiten/v2/inpututil"
	"github.com/hajimehoshi/ebiten/v2/vector"

	"github.com/anoptic/broadside/demo/viewer"
)

// Game is an ebiten.Game showing a viewer.Model.
type Game struct {
	model *viewer.Model

	mu      sync.Mutex
	tasks   []task
	shots   []chan Shot
	stopped bool

	posted []func(*viewer.Model)
	onDraw func(*viewer.Model, *viewer.Scene)
	frames uint64

	lastCursor image.Point
	text       textLayers
	scene      *viewer.Scene
}

type task struct {
	fn   func(*viewer.Model)
	done chan struct{}
}

// New returns a Game showing m.
func New(m *viewer.Model) *Game { return &Game{model: m} }

// Do runs fn on the game's goroutine during the next Update, between input
// handling and playback, and waits for it: the way tests (and anything
// else off the main goroutine) act on the model.
func (g *Game) Do(fn func(*viewer.Model)) {
	done := make(chan struct{})
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.tasks = append(g.tasks, task{fn, done})
	g.mu.Unlock()
	<-done
}

// Post runs fn on the game's goroutine during the next Update, like Do,
// but returns at once: the way a browser's JavaScript callbacks, which
// must not block, act on the model.
func (g *Game) Post(fn func(*viewer.Model)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped {
		g.posted = append(g.posted, fn)
	}
}

// OnDraw sets fn to be called after every frame is drawn, with the model
// and the scene drawn, on the game's goroutine (e.g. to publish the
// viewer's state to a web page). Set it before RunGame.
func (g *Game) OnDraw(fn func(*viewer.Model, *viewer.Scene)) { g.onDraw = fn }

// Frames returns the number of frames drawn.
func (g *Game) Frames() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.frames
}

// Shot is a frame read back from the screen, with the scene drawn in it.
type Shot struct {
	Image *image.RGBA
	Scene *viewer.Scene
}

// Screenshot returns the next frame drawn (a zero Shot once stopped).
func (g *Game) Screenshot() Shot {
	c := make(chan Shot, 1)
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return Shot{}
	}
	g.shots = append(g.shots, c)
	g.mu.Unlock()
	return <-c
}

// Stop makes RunGame return after the current frame.
func (g *Game) Stop() {
	g.mu.Lock()
	g.stopped = true
	for _, t := range g.tasks {
		close(t.done)
	}
	g.tasks = nil
	for _, c := range g.shots {
		c <- Shot{}
	}
	g.shots = nil
	g.mu.Unlock()
}

// Update implements ebiten.Game.
func (g *Game) Update() error {
	g.mu.Lock()
	stopped, tasks, posted := g.stopped, g.tasks, g.posted
	g.tasks, g.posted = nil, nil
	g.mu.Unlock()
	if stopped {
		return ebiten.Termination
	}
	g.handleInput()
	for _, t := range tasks {
		t.fn(g.model)
		close(t.done)
	}
	for _, fn := range posted {
		fn(g.model)
	}
	g.model.Update(1 / float64(ebiten.TPS()))
	return nil
}

// heldKeys repeat while held.
var heldKeys = []struct {
	key    ebiten.Key
	action viewer.Key
}{
	{ebiten.KeyA, viewer.KeyPanLeft}, {ebiten.KeyD, viewer.KeyPanRight},
	{ebiten.KeyW, viewer.KeyPanUp}, {ebiten.KeyS, viewer.KeyPanDown},
	{ebiten.KeyZ, viewer.KeyZoomIn}, {ebiten.KeyX, viewer.KeyZoomOut},
}

// repeated reports a key press, repeating while the key is held.
func repeated(k ebiten.Key) bool {
	d := inpututil.KeyPressDuration(k)
	return d == 1 || d > 18 && d%3 == 0
}

func (g *Game) handleInput() {
	m := g.model
	shift := ebiten.IsKeyPressed(ebiten.KeyShift)
	press := func(k viewer.Key) { m.Key(k) }
	if inpututil.IsKeyJustPressed(ebiten.KeySpace) {
		press(viewer.KeyPlayPause)
	}
	if repeated(ebiten.KeyArrowLeft) {
		if shift {
			press(viewer.KeySecondBack)
		} else {
			press(viewer.KeyStepBack)
		}
	}
	if repeated(ebiten.KeyArrowRight) {
		if shift {
			press(viewer.KeySecondForward)
		} else {
			press(viewer.KeyStepForward)
		}
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyEqual) || inpututil.IsKeyJustPressed(ebiten.KeyNumpadAdd) {
		press(viewer.KeyFaster)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyMinus) || inpututil.IsKeyJustPressed(ebiten.KeyNumpadSubtract) {
		press(viewer.KeySlower)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyHome) {
		press(viewer.KeyFirst)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyEnd) {
		press(viewer.KeyLast)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyH) || inpututil.IsKeyJustPressed(ebiten.KeySlash) || inpututil.IsKeyJustPressed(ebiten.KeyF1) {
		press(viewer.KeyHelp)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyEscape) {
		press(viewer.KeyEscape)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyTab) {
		press(viewer.KeySwitch)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyF) {
		press(viewer.KeyFit)
	}
	if inpututil.IsKeyJustPressed(ebiten.KeyC) {
		press(viewer.KeyFollow)
	}
	for _, b := range heldKeys {
		if repeated(b.key) {
			press(b.action)
		}
	}

	x, y := ebiten.CursorPosition()
	p := viewer.Point{X: float64(x), Y: float64(y)}
	if inpututil.IsMouseButtonJustPressed(ebiten.MouseButtonLeft) {
		m.MouseDown(p)
	}
	if cur := image.Pt(x, y); cur != g.lastCursor {
		g.lastCursor = cur
		m.MouseMove(p)
	}
	if inpututil.IsMouseButtonJustReleased(ebiten.MouseButtonLeft) {
		m.MouseUp(p)
	}
	if _, dy := ebiten.Wheel(); dy != 0 {
		m.Wheel(p, dy)
	}
}

// Draw implements ebiten.Game.
func (g *Game) Draw(screen *ebiten.Image) {
	g.scene = g.model.Scene()
	render(screen, g.scene, &g.text)
	g.mu.Lock()
	shots := g.shots
	g.shots = nil
	g.frames++
	g.mu.Unlock()
	if g.onDraw != nil {
		g.onDraw(g.model, g.scene)
	}
	if len(shots) > 0 {
		img := image.NewRGBA(screen.Bounds())
		screen.ReadPixels(img.Pix)
		for _, c := range shots {
			c <- Shot{Image: img, Scene: g.scene}
		}
	}
}

// Layout implements ebiten.Game: the screen is as large as the window.
func (g *Game) Layout(outsideWidth, outsideHeight int) (int, int) {
	g.model.Resize(outsideWidth, outsideHeight)
	return outsideWidth, outsideHeight
}

var (
	whiteImage = ebiten.NewImage(3, 3)
	// whiteSubImage is a white 1×1 source for DrawTriangles (an inner
	// pixel, so that sampling never reaches the edge).
	whiteSubImage = whiteImage.SubImage(image.Rect(1, 1, 2, 2)).(*ebiten.Image)
)

func init() { whiteImage.Fill(color.White) }

// textLayers draws text in colours: Ebitengine's debug font is white, so
// each colour's text is drawn on a transparent layer that is then drawn
// on the screen tinted.
type textLayers struct {
	layer   *ebiten.Image
	pending []viewer.Shape
}

func (t *textLayers) add(s viewer.Shape) { t.pending = append(t.pending, s) }

func (t *textLayers) flush(dst *ebiten.Image) {
	if len(t.pending) == 0 {
		return
	}
	b := dst.Bounds()
	if t.layer == nil || t.layer.Bounds().Size() != b.Size() {
		if t.layer != nil {
			t.layer.Deallocate()
		}
		t.layer = ebiten.NewImage(b.Dx(), b.Dy())
	}
	done := make([]bool, len(t.pending))
	for i, s := range t.pending {
		if done[i] {
			continue
		}
		t.layer.Clear()
		for j := i; j < len(t.pending); j++ {
			if o := t.pending[j]; !done[j] && o.Color == s.Color {
				ebitenutil.DebugPrintAt(t.layer, o.Text, int(o.Center.X), int(o.Center.Y))
				done[j] = true
			}
		}
		op := &ebiten.DrawImageOptions{}
		op.GeoM.Translate(float64(b.Min.X), float64(b.Min.Y))
		op.ColorScale.ScaleWithColor(s.Color)
		dst.DrawImage(t.layer, op)
	}
	t.pending = t.pending[:0]
}

// render draws scene on screen; text is drawn with the help of layers.
func render(screen *ebiten.Image, scene *viewer.Scene, text *textLayers) {
	screen.Fill(scene.Background)
	cam := scene.Camera
	v := cam.Viewport
	world := screen.SubImage(image.Rect(int(v.X), int(v.Y), int(v.X+v.W), int(v.Y+v.H))).(*ebiten.Image)
	for i := range scene.World {
		drawShape(world, &scene.World[i], cam, true)
	}
	for i := range scene.Screen {
		s := &scene.Screen[i]
		if s.Kind == viewer.ShapeText {
			text.add(*s)
			continue
		}
		text.flush(screen)
		drawShape(screen, s, cam, false)
	}
	text.flush(screen)
}

func drawShape(dst *ebiten.Image, s *viewer.Shape, cam viewer.Camera, inWorld bool) {
	pt := func(p viewer.Point) (float32, float32) {
		if inWorld {
			p = cam.WorldToScreen(p)
		}
		return float32(p.X), float32(p.Y)
	}
	scale := 1.0
	if inWorld {
		scale = cam.Zoom
	}
	switch s.Kind {
	case viewer.ShapeRect:
		vector.DrawFilledRect(dst, float32(s.Rect.X), float32(s.Rect.Y), float32(s.Rect.W), float32(s.Rect.H), s.Color, false)
	case viewer.ShapeCircle:
		x, y := pt(s.Center)
		r := float32(s.Radius * scale)
		if s.Stroke > 0 {
			vector.StrokeCircle(dst, x, y, r, float32(s.Stroke), s.Color, true)
		} else {
			vector.DrawFilledCircle(dst, x, y, max(r, 0.75), s.Color, false)
		}
	case viewer.ShapeLine:
		if len(s.Points) < 2 {
			return
		}
		x0, y0 := pt(s.Points[0])
		x1, y1 := pt(s.Points[1])
		vector.StrokeLine(dst, x0, y0, x1, y1, float32(max(s.Stroke, 1)), s.Color, false)
	case viewer.ShapePolygon:
		if len(s.Points) < 3 {
			return
		}
		var path vector.Path
		for i, p := range s.Points {
			x, y := pt(p)
			if i == 0 {
				path.MoveTo(x, y)
			} else {
				path.LineTo(x, y)
			}
		}
		path.Close()
		vs, is := path.AppendVerticesAndIndicesForFilling(nil, nil)
		r, gr, b, a := s.Color.RGBA()
		for i := range vs {
			vs[i].SrcX, vs[i].SrcY = 1, 1
			vs[i].ColorR = float32(r) / 0xffff
			vs[i].ColorG = float32(gr) / 0xffff
			vs[i].ColorB = float32(b) / 0xffff
			vs[i].ColorA = float32(a) / 0xffff
		}
		op := &ebiten.DrawTrianglesOptions{FillRule: ebiten.FillRuleNonZero}
		op.ColorScaleMode = ebiten.ColorScaleModePremultipliedAlpha
		dst.DrawTriangles(vs, is, whiteSubImage, op)
	}
}
