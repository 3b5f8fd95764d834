package viewer

import (
	"errors"
	"fmt"
	"math"

	"github.com/anoptic/broadside/lineage"
)

// Speeds are the playback speeds, in multiples of real time.
var Speeds = []float64{0.25, 0.5, 1, 2, 4, 8, 16}

// defaultSpeed is 1x.
const defaultSpeed = 2

// maxStepsPerUpdate bounds the ticks one Update plays, so a slow frame
// does not turn into a long stall.
const maxStepsPerUpdate = 64

// Key is a keyboard shortcut of the viewer (the window maps its keys to
// these).
type Key int

// Keys.
const (
	KeyPlayPause Key = iota + 1
	KeyStepBack
	KeyStepForward
	KeySecondBack
	KeySecondForward
	KeyFaster
	KeySlower
	KeyFirst
	KeyLast
	KeyHelp
	KeyEscape
	KeyFit
	KeyPanLeft
	KeyPanRight
	KeyPanUp
	KeyPanDown
	KeyZoomIn
	KeyZoomOut
	// KeyFollow keeps the selected ship in the middle of the sea's free
	// part as it moves (again: stop).
	KeyFollow
	// KeySwitch shows the other recording of a ForkPair.
	KeySwitch
)

// Shortcut documents a key binding for the help overlay.
type Shortcut struct{ Keys, Action string }

// Shortcuts are the bindings the help overlay lists; cmd/broadside-viewer
// maps Ebitengine keys to Keys accordingly.
var Shortcuts = []Shortcut{
	{"Space", "play / pause"},
	{"Left / Right", "step one tick back / forward"},
	{"Shift+Left/Right", "one second back / forward"},
	{"+ / -", "faster / slower (0.25x .. 16x)"},
	{"Home / End", "first / last tick (End follows a live match)"},
	{"drag timeline", "seek to any tick"},
	{"click a ship", "select it: Why lineage panel"},
	{"Esc", "deselect (or close this help)"},
	{"W A S D / drag", "pan"},
	{"wheel, Z / X", "zoom in / out"},
	{"F", "fit the whole sea"},
	{"C", "follow the selected ship (again: stop)"},
	{"H or ?", "toggle this help"},
}

// LiveSource is implemented by sources that follow a running match.
type LiveSource interface {
	// Live reports that the source follows a running match (its last
	// tick grows).
	Live() bool
}

// Layout sizes in pixels.
const (
	statusBarHeight = 22
	warningHeight   = 22
	timelineHeight  = 40
	panelMaxWidth   = 480
	playButtonSize  = 26
	trackLeft       = 44
	trackRightPad   = 188
	trackHeight     = 12
	dragThreshold   = 4
	panStep         = 60 // pixels per key press
)

type dragKind int

const (
	dragNone dragKind = iota
	dragTimeline
	dragPending // a press on the sea: a click unless it moves
	dragPan
)

// Model is the viewer's state machine. It is driven by Update (time
// passes), Key and mouse events, and shown by Scene. A Model is used from
// one goroutine.
type Model struct {
	src   Source
	world World
	live  bool

	width, height int
	cam           Camera
	fitted        bool
	autoFit       bool // the camera is as Fit left it: refit on changes

	playing bool
	speed   int
	carry   float64
	follow  bool // live: stay at the last tick

	selected lineage.EntityID
	// followShip keeps the camera on the selected ship.
	followShip bool
	explain    *Explanation
	whyErr     error
	whyKey     struct {
		e    lineage.EntityID
		tick uint64
	}

	help bool

	drag      dragKind
	dragStart Point
	dragLast  Point

	// err is the last error of the source, shown in the status bar.
	err error
}

// NewModel returns a paused viewer of src for a screen of width × height
// pixels, at src's current frame, the camera fitted to the sea. A live
// source starts playing, following the match.
func NewModel(src Source, width, height int) *Model {
	m := &Model{src: src, world: src.World(), speed: defaultSpeed}
	if ls, ok := src.(LiveSource); ok && ls.Live() {
		m.live, m.playing, m.follow = true, true, true
	}
	m.Resize(width, height)
	return m
}

// Resize sets the screen size. The first call fits the sea, and so does
// every later one while the camera is as Fit left it; once the user pans
// or zooms, the camera's centre and zoom are kept.
func (m *Model) Resize(width, height int) {
	if width == m.width && height == m.height && m.fitted {
		return
	}
	m.width, m.height = max(width, 200), max(height, 150)
	m.cam.Viewport = m.viewport()
	if !m.fitted || m.autoFit {
		m.Fit()
	}
}

// Fit zooms the camera to the whole sea, in the part of the viewport the
// lineage panel leaves free.
func (m *Model) Fit() {
	m.cam.Viewport = m.viewport()
	free := m.cam
	free.Viewport.W -= m.PanelRect().W
	free.Fit(float64(m.world.Width)/1000, float64(m.world.Height)/1000)
	m.cam.Zoom = free.Zoom
	// Centre the sea in the free part.
	m.cam.Center = free.Center
	m.cam.Center.X += m.PanelRect().W / 2 / m.cam.Zoom
	m.fitted, m.autoFit = true, true
}

// Source returns the viewer's source.
func (m *Model) Source() Source { return m.src }

// Tick returns the tick shown.
func (m *Model) Tick() uint64 {
	if f := m.src.Frame(); f != nil {
		return f.Tick
	}
	first, _ := m.src.Ticks()
	return first
}

// Playing reports whether playback runs.
func (m *Model) Playing() bool { return m.playing }

// Speed returns the playback speed in multiples of real time.
func (m *Model) Speed() float64 { return Speeds[m.speed] }

// Selected returns the selected entity (0: none).
func (m *Model) Selected() lineage.EntityID { return m.selected }

// HelpShown reports whether the help overlay is shown.
func (m *Model) HelpShown() bool { return m.help }

// Camera returns the camera.
func (m *Model) Camera() Camera { return m.cam }

// Err returns the last error of the source (nil: none).
func (m *Model) Err() error { return m.err }

// Explanation returns the lineage of the selected ship at the tick shown,
// computing it if needed (nil and an error if it cannot).
func (m *Model) Explanation() (*Explanation, error) {
	if m.selected == 0 {
		return nil, nil
	}
	tick := m.Tick()
	if m.whyKey.e == m.selected && m.whyKey.tick == tick && (m.explain != nil || m.whyErr != nil) {
		return m.explain, m.whyErr
	}
	m.whyKey.e, m.whyKey.tick = m.selected, tick
	m.explain, m.whyErr = nil, nil
	ship, ok := m.src.Frame().Ship(m.selected)
	if !ok {
		m.whyErr = fmt.Errorf("%s is not in the sea at tick %d (in transit between sectors?)", EntityName(m.selected), tick)
		return nil, m.whyErr
	}
	r, err := m.src.Why(m.selected, tick, WhyDepth)
	switch {
	case errors.Is(err, lineage.ErrUnknownEntity):
		m.whyErr = fmt.Errorf("no lineage recorded for %s up to tick %d", EntityName(m.selected), tick)
	case err != nil:
		m.whyErr = err
	default:
		m.explain = Explain(r, ship, m.src)
	}
	return m.explain, m.whyErr
}

// Update advances playback by dt seconds of real time.
func (m *Model) Update(dt float64) {
	first, last := m.src.Ticks()
	if m.live && m.follow {
		if m.Tick() != last {
			m.seek(last)
		}
		return
	}
	if !m.playing {
		return
	}
	rate := float64(max(m.world.TickRate, 1)) * Speeds[m.speed]
	m.carry += dt * rate
	steps := int(m.carry)
	m.carry -= float64(steps)
	steps = min(steps, maxStepsPerUpdate)
	for ; steps > 0; steps-- {
		if t := m.Tick(); t >= last || t < first {
			if !m.live {
				m.playing = false
				m.carry = 0
			}
			return
		}
		if err := m.src.Step(); err != nil {
			m.err, m.playing = err, false
			return
		}
	}
}

// seek moves to tick, clamped to the source's range.
func (m *Model) seek(tick uint64) {
	first, last := m.src.Ticks()
	tick = min(max(tick, first), last)
	if f := m.src.Frame(); f != nil && f.Tick == tick {
		return
	}
	if err := m.src.Seek(tick); err != nil {
		m.err = err
		return
	}
	m.err = nil
}

// SeekTo moves to tick (clamped to the source's range) and stops
// following a live match unless it is the last tick.
func (m *Model) SeekTo(tick uint64) {
	_, last := m.src.Ticks()
	m.follow = m.live && tick >= last
	m.seek(tick)
}

// step moves by delta ticks, pausing playback.
func (m *Model) step(delta int64) {
	m.playing = false
	t := int64(m.Tick()) + delta
	first, last := m.src.Ticks()
	t = min(max(t, int64(first)), int64(last))
	if delta == 1 && uint64(t) == m.Tick()+1 {
		if err := m.src.Step(); err != nil {
			m.err = err
		}
		m.follow = false
		return
	}
	m.SeekTo(uint64(t))
}

// Key handles a keyboard shortcut.
func (m *Model) Key(k Key) {
	second := int64(max(m.world.TickRate, 1))
	switch k {
	case KeyPlayPause:
		m.togglePlay()
	case KeyStepBack:
		m.step(-1)
	case KeyStepForward:
		m.step(1)
	case KeySecondBack:
		m.step(-second)
	case KeySecondForward:
		m.step(second)
	case KeyFaster:
		m.speed = min(m.speed+1, len(Speeds)-1)
	case KeySlower:
		m.speed = max(m.speed-1, 0)
	case KeyFirst:
		first, _ := m.src.Ticks()
		m.SeekTo(first)
	case KeyLast:
		_, last := m.src.Ticks()
		m.SeekTo(last)
	case KeyHelp:
		m.help = !m.help
	case KeyEscape:
		if m.help {
			m.help = false
		} else {
			m.Select(0)
		}
	case KeyFit:
		m.followShip = false
		m.Fit()
	case KeyFollow:
		m.followShip = m.selected != 0 && !m.followShip
		if m.followShip {
			m.autoFit = false
			m.centreOnShip()
		}
	case KeySwitch:
		if p, ok := m.src.(*ForkPair); ok && p.Switch() == nil {
			m.world = m.src.World()
		}
	case KeyPanLeft:
		m.pan(panStep, 0)
	case KeyPanRight:
		m.pan(-panStep, 0)
	case KeyPanUp:
		m.pan(0, panStep)
	case KeyPanDown:
		m.pan(0, -panStep)
	case KeyZoomIn:
		m.zoom(m.center(), 1.25)
	case KeyZoomOut:
		m.zoom(m.center(), 1/1.25)
	}
}

func (m *Model) togglePlay() {
	if m.playing {
		m.playing, m.follow = false, false
		return
	}
	first, last := m.src.Ticks()
	if !m.live && m.Tick() >= last {
		m.seek(first) // at the end: play again from the start
	}
	m.playing, m.carry = true, 0
}

// Select selects entity e (0: none).
func (m *Model) Select(e lineage.EntityID) {
	if e == 0 {
		m.followShip = false
	}
	if e != m.selected {
		wasOpen := m.selected != 0
		m.selected, m.explain, m.whyErr = e, nil, nil
		m.whyKey.e = 0
		if m.autoFit && wasOpen != (e != 0) {
			m.Fit() // the panel opened or closed
		}
	}
}

func (m *Model) center() Point {
	v := m.cam.Viewport
	return Point{v.X + v.W/2, v.Y + v.H/2}
}

func (m *Model) zoom(at Point, factor float64) {
	m.cam.ZoomAt(at, factor)
	m.autoFit = false
}

func (m *Model) pan(dx, dy float64) {
	m.followShip = false
	m.cam.Pan(dx, dy)
	m.autoFit = false
}

// FollowingShip reports whether the camera follows the selected ship.
func (m *Model) FollowingShip() bool { return m.followShip }

// centreOnShip moves the camera so that the selected ship is drawn in the
// middle of the part of the sea the panel leaves free (when it is in the
// frame shown: a ship in transit between sectors keeps the camera still).
func (m *Model) centreOnShip() {
	if !m.followShip {
		return
	}
	v, ok := m.src.Frame().Ship(m.selected)
	if !ok {
		return
	}
	m.cam.Viewport = m.viewport()
	vp := m.cam.Viewport
	want := Point{vp.X + (vp.W-m.PanelRect().W)/2, vp.Y + vp.H/2}
	at := m.ShipScreenPos(v)
	m.cam.Center.X += (at.X - want.X) / m.cam.Zoom
	m.cam.Center.Y -= (at.Y - want.Y) / m.cam.Zoom
}

// Wheel zooms by dy wheel notches at screen point p.
func (m *Model) Wheel(p Point, dy float64) {
	if !m.cam.Viewport.Contains(p) || m.PanelRect().Contains(p) || dy == 0 {
		return
	}
	m.zoom(p, math.Pow(1.2, dy))
}

// MouseDown handles a press of the main button at screen point p.
func (m *Model) MouseDown(p Point) {
	if m.help {
		m.help = false
		m.drag = dragNone
		return
	}
	switch {
	case m.playButton().Contains(p):
		m.togglePlay()
	case m.timelineHitArea().Contains(p):
		m.drag = dragTimeline
		m.seekToX(p.X)
	case m.PanelRect().Contains(p):
		// The panel only shows; Esc or a click on the sea closes it.
	case m.cam.Viewport.Contains(p):
		m.drag, m.dragStart, m.dragLast = dragPending, p, p
	}
}

// MouseMove handles the pointer moving to p (with the button down or not).
func (m *Model) MouseMove(p Point) {
	switch m.drag {
	case dragTimeline:
		m.seekToX(p.X)
	case dragPending:
		if math.Hypot(p.X-m.dragStart.X, p.Y-m.dragStart.Y) < dragThreshold {
			return
		}
		m.drag = dragPan
		fallthrough
	case dragPan:
		m.pan(p.X-m.dragLast.X, p.Y-m.dragLast.Y)
		m.dragLast = p
	}
}

// MouseUp handles the release of the main button at p: a press and
// release on the sea without moving is a click, which selects the ship
// under it (or deselects).
func (m *Model) MouseUp(p Point) {
	if m.drag == dragPending {
		m.Select(m.ShipAt(p))
	}
	m.drag = dragNone
}

// Click is MouseDown then MouseUp at p.
func (m *Model) Click(p Point) {
	m.MouseDown(p)
	m.MouseUp(p)
}

// ShipAt returns the ship drawn under screen point p (0: none): the
// nearest whose hull, as drawn, is within reach.
func (m *Model) ShipAt(p Point) lineage.EntityID {
	f := m.src.Frame()
	if f == nil {
		return 0
	}
	w := m.cam.ScreenToWorld(p)
	reach := hullLength / 2 * shipScale(m.cam.Zoom)
	reach = math.Max(reach, 6/m.cam.Zoom)
	var best lineage.EntityID
	bestD := math.Inf(1)
	for _, s := range f.Ships {
		x, y := s.Meters()
		if d := math.Hypot(x-w.X, y-w.Y); d <= reach && d < bestD {
			best, bestD = s.ID, d
		}
	}
	return best
}

// TickAtX returns the tick the timeline shows at screen x.
func (m *Model) TickAtX(x float64) uint64 {
	first, last := m.src.Ticks()
	tr := m.track()
	f := (x - tr.X) / tr.W
	f = math.Min(math.Max(f, 0), 1)
	return first + uint64(math.Round(f*float64(last-first)))
}

// XOfTick returns the timeline's screen x for tick.
func (m *Model) XOfTick(tick uint64) float64 {
	first, last := m.src.Ticks()
	tr := m.track()
	if last <= first {
		return tr.X
	}
	return tr.X + tr.W*float64(tick-first)/float64(last-first)
}

func (m *Model) seekToX(x float64) { m.SeekTo(m.TickAtX(x)) }

// Layout.

// top is where the panel starts: below the status bar and the warning
// band. The sea's viewport starts right below the status bar whatever is
// shown over it, so that the camera never jumps.
func (m *Model) top() float64 {
	if m.warningShown() {
		return statusBarHeight + warningHeight
	}
	return statusBarHeight
}

func (m *Model) warningShown() bool { return m.src.Verification().State == VerifyFailed }

// PanelRect returns the lineage panel's rectangle (zero if no ship is
// selected).
func (m *Model) PanelRect() Rect {
	if m.selected == 0 {
		return Rect{}
	}
	w := math.Min(panelMaxWidth, float64(m.width)/2)
	top := m.top()
	return Rect{float64(m.width) - w, top, w, float64(m.height) - timelineHeight - top}
}

func (m *Model) viewport() Rect {
	return Rect{0, statusBarHeight, float64(m.width), float64(m.height) - timelineHeight - statusBarHeight}
}

// TimelineRect returns the timeline bar's rectangle.
func (m *Model) TimelineRect() Rect {
	return Rect{0, float64(m.height) - timelineHeight, float64(m.width), timelineHeight}
}

func (m *Model) playButton() Rect {
	tl := m.TimelineRect()
	return Rect{8, tl.Y + (timelineHeight-playButtonSize)/2, playButtonSize, playButtonSize}
}

func (m *Model) track() Rect {
	tl := m.TimelineRect()
	return Rect{trackLeft, tl.Y + (timelineHeight-trackHeight)/2, math.Max(float64(m.width)-trackLeft-trackRightPad, 20), trackHeight}
}

func (m *Model) timelineHitArea() Rect {
	tr, tl := m.track(), m.TimelineRect()
	return Rect{tr.X - 6, tl.Y, tr.W + 12, tl.H}
}
