package viewer

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"github.com/anoptic/broadside/demo/broadside"
)

// Scene returns what the viewer shows now.
func (m *Model) Scene() *Scene {
	m.cam.Viewport = m.viewport()
	m.centreOnShip()
	s := &Scene{Width: m.width, Height: m.height, Background: ColorOutside, Camera: m.cam}
	x, xerr := m.Explanation()
	m.buildWorld(s, x)
	m.buildStatusBar(s)
	if m.warningShown() {
		m.buildWarning(s)
	}
	m.buildTimeline(s)
	if m.selected != 0 {
		m.buildPanel(s, x, xerr)
	}
	if m.help {
		m.buildHelp(s)
	}
	return s
}

func (m *Model) buildWorld(s *Scene, x *Explanation) {
	w, h := float64(m.world.Width)/1000, float64(m.world.Height)/1000
	s.World = append(s.World, Shape{Kind: ShapePolygon, Points: []Point{{0, 0}, {w, 0}, {w, h}, {0, h}}, Color: ColorSea, Role: RoleSea})
	for _, r := range m.world.Sectors {
		x0, y0, x1, y1 := float64(r.X0)/1000, float64(r.Y0)/1000, float64(r.X1)/1000, float64(r.Y1)/1000
		// Each sector's east and north borders, except the sea's edges.
		if x1 < w {
			s.World = append(s.World, Shape{Kind: ShapeLine, Points: []Point{{x1, y0}, {x1, y1}}, Stroke: 1, Color: ColorSectorLine, Role: RoleSector})
		}
		if y1 < h {
			s.World = append(s.World, Shape{Kind: ShapeLine, Points: []Point{{x0, y1}, {x1, y1}}, Stroke: 1, Color: ColorSectorLine, Role: RoleSector})
		}
	}
	for _, is := range m.world.Islands {
		s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{float64(is.X) / 1000, float64(is.Y) / 1000},
			Radius: float64(is.Radius) / 1000, Color: ColorIsland, Role: RoleIsland})
	}
	f := m.src.Frame()
	if f == nil {
		return
	}
	ballR := math.Max(2.5, minBallPixels/m.cam.Zoom)
	for _, b := range f.Balls {
		bx, by := b.Meters()
		s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{bx, by}, Radius: ballR, Color: ColorBall, Role: RoleBall, Entity: b.ID})
	}
	scale := shipScale(m.cam.Zoom)
	// Sunk ships first, so that afloat ones are drawn over them.
	for pass := 0; pass < 2; pass++ {
		for _, v := range f.Ships {
			if v.Sunk != (pass == 0) {
				continue
			}
			c := TeamColor(v.Player)
			if v.Sunk {
				c = ColorSunk
			}
			s.World = append(s.World, Shape{Kind: ShapePolygon, Points: ShipOutline(v, scale), Color: c, Role: RoleShip, Entity: v.ID})
		}
	}
	ring := hullLength / 2 * scale * 1.25
	for _, v := range f.Ships {
		vx, vy := v.Meters()
		switch {
		case v.ID == m.selected:
			s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{vx, vy}, Radius: ring, Stroke: 2, Color: ColorSelection, Role: RoleSelection, Entity: v.ID})
		case x != nil && x.Killers[v.ID]:
			s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{vx, vy}, Radius: ring, Stroke: 3, Color: ColorKiller, Role: RoleKiller, Entity: v.ID})
		case x != nil && x.OnChain[v.ID]:
			s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{vx, vy}, Radius: ring, Stroke: 2, Color: ColorChain, Role: RoleChain, Entity: v.ID})
		}
	}
	if x == nil {
		return
	}
	for _, b := range f.Balls {
		if x.OnChain[b.ID] {
			bx, by := b.Meters()
			s.World = append(s.World, Shape{Kind: ShapeCircle, Center: Point{bx, by}, Radius: ballR * 2.5, Stroke: 1, Color: ColorChain, Role: RoleChain, Entity: b.ID})
		}
	}
}

func text(s *Scene, x, y float64, c color.RGBA, str string) {
	s.Screen = append(s.Screen, Shape{Kind: ShapeText, Center: Point{x, y}, Color: c, Text: str, Role: RoleText})
}

func rect(s *Scene, r Rect, c color.RGBA, role Role) {
	s.Screen = append(s.Screen, Shape{Kind: ShapeRect, Rect: r, Color: c, Role: role})
}

func (m *Model) buildStatusBar(s *Scene) {
	rect(s, Rect{0, 0, float64(m.width), statusBarHeight}, ColorBar, RoleStatusBar)
	first, last := m.src.Ticks()
	state := "paused"
	if m.playing {
		state = "playing"
	}
	if m.live && m.follow {
		state = "live"
	}
	ships, balls := 0, 0
	if f := m.src.Frame(); f != nil {
		ships, balls = len(f.Ships), len(f.Balls)
	}
	rate := float64(max(m.world.TickRate, 1))
	line := fmt.Sprintf("%s  tick %d (%d..%d)  %s  %s  ships %d  balls %d  %s   H: help",
		m.world.Title, m.Tick(), first, last, clock(float64(m.Tick())/rate), state, ships, balls, verifyLabel(m.src.Verification()))
	if ss, ok := m.src.(StatusSource); ok {
		line += "  " + ss.Status()
	}
	if m.err != nil {
		line += "  error: " + m.err.Error()
	}
	text(s, 6, 3, ColorText, clip(line, m.width/CharWidth-2))
}

func verifyLabel(v Verification) string {
	switch v.State {
	case VerifyRunning:
		return "verifying... " + v.Detail
	case VerifyOK:
		return "hashes verified"
	case VerifyFailed:
		return "HASHES DO NOT VERIFY"
	}
	return ""
}

func clock(sec float64) string {
	m := int(sec) / 60
	return fmt.Sprintf("%d:%04.1f", m, sec-float64(60*m))
}

func clip(s string, n int) string {
	if n < 1 {
		return ""
	}
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (m *Model) buildWarning(s *Scene) {
	r := Rect{0, statusBarHeight, float64(m.width), warningHeight}
	rect(s, r, ColorWarning, RoleWarning)
	v := m.src.Verification()
	msg := "WARNING: this recording does not verify: re-simulating it does not reproduce its state hashes"
	if v.Detail != "" {
		msg = "WARNING: this recording does not verify: " + v.Detail
	}
	text(s, 8, r.Y+3, ColorTitle, clip(msg, m.width/CharWidth-2))
}

func (m *Model) buildTimeline(s *Scene) {
	tl := m.TimelineRect()
	rect(s, tl, ColorBar, RoleTimeline)
	pb := m.playButton()
	rect(s, pb, ColorTrack, RolePlayButton)
	cx, cy := pb.X+pb.W/2, pb.Y+pb.H/2
	if m.playing {
		rect(s, Rect{cx - 6, cy - 7, 4, 14}, ColorKnob, RolePlayButton)
		rect(s, Rect{cx + 2, cy - 7, 4, 14}, ColorKnob, RolePlayButton)
	} else {
		s.Screen = append(s.Screen, Shape{Kind: ShapePolygon, Points: []Point{{cx - 5, cy - 8}, {cx + 7, cy}, {cx - 5, cy + 8}}, Color: ColorKnob, Role: RolePlayButton})
	}
	tr := m.track()
	rect(s, tr, ColorTrack, RoleTimelineTrack)
	kx := m.XOfTick(m.Tick())
	rect(s, Rect{tr.X, tr.Y, kx - tr.X, tr.H}, ColorPlayed, RoleTimelineTrack)
	s.Screen = append(s.Screen, Shape{Kind: ShapeRect, Rect: Rect{kx - 3, tl.Y + 6, 6, tl.H - 12}, Color: ColorKnob, Role: RoleTimelineKnob})
	_, last := m.src.Ticks()
	label := fmt.Sprintf("%d/%d  %gx", m.Tick(), last, Speeds[m.speed])
	text(s, tr.X+tr.W+12, tl.Y+(timelineHeight-LineHeight)/2, ColorText, label)
}

func (m *Model) buildPanel(s *Scene, x *Explanation, err error) {
	r := m.PanelRect()
	rect(s, r, ColorPanel, RolePanel)
	cols := int(r.W)/CharWidth - 2
	rows := int(r.H)/LineHeight - 1
	y := r.Y + 6
	put := func(c color.RGBA, str string) {
		if y+LineHeight > r.Y+r.H {
			return
		}
		text(s, r.X+8, y, c, clip(str, cols))
		y += LineHeight
	}
	if x == nil {
		put(ColorTitle, "Why: "+EntityName(m.selected))
		if err != nil {
			for _, l := range wrap(err.Error(), cols) {
				put(ColorAlert, l)
			}
		}
		put(ColorText, "Esc: close")
		return
	}
	if v, ok := m.src.Frame().Ship(m.selected); ok {
		state := fmt.Sprintf("hull %d", v.Hull)
		if v.Sunk {
			state = "sunk"
		}
		sx, sy := v.Meters()
		put(ColorTitle, fmt.Sprintf("player %d's ship at (%.0f, %.0f) m, %s, sector %d", v.Player, sx, sy, state, v.Sector))
	}
	for _, l := range x.Lines(cols, rows-2) {
		c := ColorText
		switch l.Kind {
		case LineTitle:
			c = ColorTitle
		case LineHeading:
			c = ColorHeading
		case LineAlert:
			c = ColorAlert
		case LineChain:
			c = ColorChainText
		}
		put(c, l.Text)
	}
}

func wrap(s string, n int) []string {
	var out []string
	for n > 0 && len(s) > n {
		cut := strings.LastIndexByte(s[:n], ' ')
		if cut <= 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = strings.TrimLeft(s[cut:], " ")
	}
	return append(out, s)
}

func (m *Model) buildHelp(s *Scene) {
	w := math.Min(440, float64(m.width)-40)
	h := float64(LineHeight*(len(Shortcuts)+3) + 12)
	r := Rect{(float64(m.width) - w) / 2, (float64(m.height) - h) / 2, w, h}
	rect(s, r, ColorHelp, RoleHelp)
	y := r.Y + 8
	text(s, r.X+12, y, ColorTitle, "Broadside viewer: keyboard and mouse")
	y += LineHeight * 1.5
	for _, sc := range Shortcuts {
		text(s, r.X+12, y, ColorHeading, sc.Keys)
		text(s, r.X+12+18*CharWidth, y, ColorText, clip(sc.Action, int(w)/CharWidth-21))
		y += LineHeight
	}
	text(s, r.X+12, y+2, ColorText, "Esc, H or a click closes this help")
}

// ShipScreenPos returns where ship v's centre is drawn on screen.
func (m *Model) ShipScreenPos(v broadside.ShipView) Point {
	x, y := v.Meters()
	return m.cam.WorldToScreen(Point{x, y})
}
