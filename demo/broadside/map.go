package broadside

import "slices"

// Map is the layout of a world's sea, in millimetres: its size, its
// islands and the sectors' rectangles. It is a function of the world's
// Config, the same in every sector and process; viewers draw it.
type Map struct {
	Width, Height int32
	Islands       []Island
	// Sectors[i] is sector i's rectangle.
	Sectors []Rect
}

// MapOf returns the map of a world of cfg.
func MapOf(cfg Config) (Map, error) {
	g, err := newGeometry(cfg)
	if err != nil {
		return Map{}, err
	}
	m := Map{Width: g.w, Height: g.h, Islands: slices.Clone(g.islands)}
	for i := range g.cfg.Sectors() {
		m.Sectors = append(m.Sectors, g.bounds(i))
	}
	return m, nil
}
