package viewer

import "math"

// Point is a position: in metres in the world (X east, Y north) or in
// pixels on the screen (X right, Y down), as the context says.
type Point struct{ X, Y float64 }

// Rect is a screen rectangle in pixels.
type Rect struct{ X, Y, W, H float64 }

// Contains reports whether p is inside r.
func (r Rect) Contains(p Point) bool {
	return p.X >= r.X && p.X < r.X+r.W && p.Y >= r.Y && p.Y < r.Y+r.H
}

// Camera maps world metres to screen pixels: the world point Center is
// drawn at the middle of Viewport, Zoom pixels to the metre, north up.
type Camera struct {
	Center   Point
	Zoom     float64
	Viewport Rect
}

// Zoom limits, in pixels per metre.
const (
	MinZoom = 0.005
	MaxZoom = 20
)

// WorldToScreen returns the pixel at which world point p is drawn.
func (c Camera) WorldToScreen(p Point) Point {
	return Point{
		X: c.Viewport.X + c.Viewport.W/2 + (p.X-c.Center.X)*c.Zoom,
		Y: c.Viewport.Y + c.Viewport.H/2 - (p.Y-c.Center.Y)*c.Zoom,
	}
}

// ScreenToWorld returns the world point drawn at pixel p.
func (c Camera) ScreenToWorld(p Point) Point {
	return Point{
		X: c.Center.X + (p.X-c.Viewport.X-c.Viewport.W/2)/c.Zoom,
		Y: c.Center.Y - (p.Y-c.Viewport.Y-c.Viewport.H/2)/c.Zoom,
	}
}

// Fit centres the camera on a world of w × h metres and zooms so that it
// fills the viewport with a small margin.
func (c *Camera) Fit(w, h float64) {
	c.Center = Point{w / 2, h / 2}
	if w <= 0 || h <= 0 || c.Viewport.W <= 0 || c.Viewport.H <= 0 {
		c.Zoom = 1
		return
	}
	c.Zoom = clampZoom(0.96 * math.Min(c.Viewport.W/w, c.Viewport.H/h))
}

// ZoomAt multiplies the zoom by factor, keeping the world point under
// screen pixel p where it is.
func (c *Camera) ZoomAt(p Point, factor float64) {
	before := c.ScreenToWorld(p)
	c.Zoom = clampZoom(c.Zoom * factor)
	after := c.ScreenToWorld(p)
	c.Center.X += before.X - after.X
	c.Center.Y += before.Y - after.Y
}

// Pan moves the view by (dx, dy) screen pixels (the world follows the
// mouse: dragging right moves the world right).
func (c *Camera) Pan(dx, dy float64) {
	c.Center.X -= dx / c.Zoom
	c.Center.Y += dy / c.Zoom
}

func clampZoom(z float64) float64 { return math.Min(math.Max(z, MinZoom), MaxZoom) }
