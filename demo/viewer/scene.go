package viewer

import (
	"image/color"
	"math"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

// ShapeKind says how a Shape is drawn.
type ShapeKind int

// Shape kinds.
const (
	// ShapeRect is an axis-aligned rectangle (Rect, screen layer only).
	ShapeRect ShapeKind = iota
	// ShapePolygon is a convex polygon through Points.
	ShapePolygon
	// ShapeCircle is a circle of Radius around Center.
	ShapeCircle
	// ShapeLine is a segment from Points[0] to Points[1].
	ShapeLine
	// ShapeText is a line of text whose top-left corner is Center, in a
	// CharWidth × LineHeight monospace font (screen layer only).
	ShapeText
)

// Text metrics the layout assumes: Ebitengine's debug font.
const (
	CharWidth  = 6
	LineHeight = 16
)

// Shape is one thing to draw. In Scene.World, positions and radii are in
// world metres and Stroke in pixels; in Scene.Screen, everything is in
// pixels.
type Shape struct {
	Kind   ShapeKind
	Points []Point
	Center Point
	Radius float64
	Rect   Rect
	// Stroke, if positive, draws the outline this many pixels wide
	// instead of filling.
	Stroke float64
	Color  color.RGBA
	Text   string
	// Role says what the shape is, for tests and hit-testing.
	Role Role
	// Entity is the entity the shape draws (ships, balls, highlights).
	Entity lineage.EntityID
}

// Role names what a Shape shows.
type Role int

// Shape roles.
const (
	RoleNone Role = iota
	RoleSea
	RoleSector
	RoleIsland
	RoleBall
	RoleShip
	RoleSelection
	RoleChain
	RoleKiller
	RoleStatusBar
	RoleWarning
	RoleTimeline
	RoleTimelineTrack
	RoleTimelineKnob
	RolePlayButton
	RolePanel
	RoleHelp
	RoleText
)

// Scene is everything a frame of the viewer shows: World shapes are drawn
// first, through Camera and clipped to its Viewport, then Screen shapes,
// in order.
type Scene struct {
	Width, Height int
	Background    color.RGBA
	Camera        Camera
	World         []Shape
	Screen        []Shape
}

// Find returns the first shape of role (and entity, if not 0) in either
// layer.
func (s *Scene) Find(role Role, e lineage.EntityID) (Shape, bool) {
	for _, layer := range [][]Shape{s.World, s.Screen} {
		for _, sh := range layer {
			if sh.Role == role && (e == 0 || sh.Entity == e) {
				return sh, true
			}
		}
	}
	return Shape{}, false
}

// Count returns the number of shapes of role.
func (s *Scene) Count(role Role) int {
	n := 0
	for _, layer := range [][]Shape{s.World, s.Screen} {
		for _, sh := range layer {
			if sh.Role == role {
				n++
			}
		}
	}
	return n
}

// Texts returns the text of every text shape inside r, top to bottom.
func (s *Scene) Texts(r Rect) []string {
	var out []string
	for _, sh := range s.Screen {
		if sh.Kind == ShapeText && r.Contains(sh.Center) {
			out = append(out, sh.Text)
		}
	}
	return out
}

// Colours of the viewer.
var (
	ColorOutside    = color.RGBA{8, 18, 30, 255}
	ColorSea        = color.RGBA{20, 56, 92, 255}
	ColorSectorLine = color.RGBA{34, 76, 118, 255}
	ColorIsland     = color.RGBA{200, 178, 118, 255}
	ColorBall       = color.RGBA{16, 16, 16, 255}
	ColorSunk       = color.RGBA{120, 120, 120, 255}
	ColorSelection  = color.RGBA{255, 255, 255, 255}
	ColorChain      = color.RGBA{255, 226, 110, 255}
	ColorKiller     = color.RGBA{255, 50, 50, 255}
	ColorBar        = color.RGBA{12, 14, 22, 255}
	ColorWarning    = color.RGBA{178, 28, 28, 255}
	ColorTrack      = color.RGBA{62, 66, 84, 255}
	ColorPlayed     = color.RGBA{80, 140, 210, 255}
	ColorKnob       = color.RGBA{240, 240, 240, 255}
	ColorPanel      = color.RGBA{26, 28, 40, 255}
	ColorHelp       = color.RGBA{10, 10, 18, 255}
	ColorText       = color.RGBA{222, 222, 222, 255}
	ColorTitle      = color.RGBA{255, 255, 255, 255}
	ColorHeading    = color.RGBA{150, 192, 255, 255}
	ColorAlert      = color.RGBA{255, 120, 96, 255}
	ColorChainText  = color.RGBA{255, 226, 110, 255}
)

// TeamColors is the palette ships are drawn in: Broadside has no teams,
// so a player's colour is TeamColors[player % len(TeamColors)].
var TeamColors = []color.RGBA{
	{232, 64, 64, 255},   // red
	{244, 204, 40, 255},  // yellow
	{72, 204, 92, 255},   // green
	{248, 142, 32, 255},  // orange
	{214, 84, 206, 255},  // magenta
	{64, 214, 224, 255},  // cyan
	{255, 140, 180, 255}, // pink
	{172, 232, 64, 255},  // lime
}

// TeamColor returns player's ship colour.
func TeamColor(player uint32) color.RGBA { return TeamColors[player%uint32(len(TeamColors))] }

// hull is a ship's outline in metres, bow along +X: ShipRadius is 14 m
// and the guns span 28 m, so about 36 m long and 12 m in the beam.
var hull = []Point{{18, 0}, {10, 5}, {-14, 6}, {-18, 4}, {-18, -4}, {-14, -6}, {10, -5}}

// Minimum sizes on screen, so a whole sea stays readable.
const (
	minShipPixels = 20 // hull length
	minBallPixels = 2  // radius
	hullLength    = 36 // metres, of hull
)

// ShipOutline returns ship v's hull polygon in world metres, scaled by
// scale about its centre.
func ShipOutline(v broadside.ShipView, scale float64) []Point {
	x, y := v.Meters()
	a := v.HeadingRadians()
	sin, cos := math.Sincos(a)
	pts := make([]Point, len(hull))
	for i, p := range hull {
		px, py := p.X*scale, p.Y*scale
		pts[i] = Point{x + px*cos - py*sin, y + px*sin + py*cos}
	}
	return pts
}

// shipScale is how much hulls are enlarged at zoom to stay visible.
func shipScale(zoom float64) float64 {
	return math.Max(1, minShipPixels/(hullLength*zoom))
}
