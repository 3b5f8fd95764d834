package viewer

import "github.com/anoptic/broadside/demo/broadside"

// State sums up what the viewer shows, for a page or a test that watches
// it from outside the window (the browser build publishes it to
// JavaScript after every frame).
type State struct {
	Tick, First, Last uint64
	Playing, Live     bool
	// Following: a live viewer stays at the newest tick received.
	Following bool
	// FollowShip: the camera follows the selected ship.
	FollowShip bool
	Speed      float64
	// Selected names the selected entity ("" if none).
	Selected   string
	SelectedID uint64
	// Verify is "", "verifying", "verified" or "failed", with Detail.
	Verify       string
	VerifyDetail string
	// Panel holds the Why panel's lines, as drawn (empty without a
	// selection).
	Panel []string
	// Status is the status bar's line.
	Status string
	// Ships are the ships of the frame shown, with their centres on
	// screen (OnScreen: inside the sea's viewport, outside the panel).
	Ships []ShipState
	// Track is the timeline's track: ticks First..Last run from X0 to X1
	// at height Y.
	Track struct{ X0, X1, Y float64 }
	Err   string
}

// ShipState is a ship as State reports it.
type ShipState struct {
	Player   uint32
	Name     string
	X, Y     float64
	Sunk     bool
	Hull     int
	OnScreen bool
}

// State reports the viewer's state; scene is the Scene last drawn (its
// text gives Panel and Status), or nil to build one.
func (m *Model) State(scene *Scene) State {
	if scene == nil {
		scene = m.Scene()
	}
	first, last := m.src.Ticks()
	st := State{Tick: m.Tick(), First: first, Last: last, Playing: m.playing, Live: m.live, Following: m.live && m.follow,
		Speed: m.Speed(), SelectedID: uint64(m.selected), FollowShip: m.followShip}
	if m.selected != 0 {
		st.Selected = EntityName(m.selected)
	}
	v := m.src.Verification()
	st.Verify, st.VerifyDetail = map[VerifyState]string{VerifyRunning: "verifying", VerifyOK: "verified", VerifyFailed: "failed"}[v.State], v.Detail
	panel := m.PanelRect()
	for _, s := range scene.Screen {
		if s.Kind != ShapeText {
			continue
		}
		switch {
		case m.selected != 0 && panel.Contains(s.Center):
			st.Panel = append(st.Panel, s.Text)
		case s.Center.Y < statusBarHeight && st.Status == "":
			st.Status = s.Text
		}
	}
	if f := m.src.Frame(); f != nil {
		vp := m.cam.Viewport
		for _, s := range f.Ships {
			p := m.ShipScreenPos(s)
			st.Ships = append(st.Ships, ShipState{Player: s.Player, Name: EntityName(s.ID), X: p.X, Y: p.Y, Sunk: s.Sunk, Hull: int(s.Hull),
				OnScreen: vp.Contains(p) && !panel.Contains(p)})
		}
	}
	tr := m.track()
	st.Track.X0, st.Track.X1, st.Track.Y = tr.X, tr.X+tr.W, tr.Y+tr.H/2
	if m.err != nil {
		st.Err = m.err.Error()
	}
	return st
}

// SelectPlayer selects player p's ship (false if the frame shown has none).
func (m *Model) SelectPlayer(p uint32) bool {
	id := broadside.ShipID(p)
	if _, ok := m.src.Frame().Ship(id); !ok {
		return false
	}
	m.Select(id)
	return true
}
