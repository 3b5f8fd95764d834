// Package viewer is the replay viewer's model: what it shows (a Source of
// frames, the lineage of entities), the viewer's state machine (play and
// pause, speed, stepping, seeking by dragging the timeline, selecting a ship,
// the camera, the help overlay) and a Scene, a list of coloured shapes in
// world and screen coordinates that a window draws.
//
// The package is pure Go and never opens a window: cmd/broadside-viewer
// draws Scenes with Ebitengine and feeds input events back, and tests drive
// a Model and assert on its Scenes directly.
package viewer

import (
	"errors"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

// Frame is the state of the world at the end of one tick.
type Frame struct {
	Tick  uint64
	Ships []broadside.ShipView
	Balls []broadside.BallView
}

// Ship returns the ship with entity id e, if the frame holds it.
func (f *Frame) Ship(e lineage.EntityID) (broadside.ShipView, bool) {
	if f == nil {
		return broadside.ShipView{}, false
	}
	for _, s := range f.Ships {
		if s.ID == e {
			return s, true
		}
	}
	return broadside.ShipView{}, false
}

// World describes what does not change during a match.
type World struct {
	// Title names the match (a file name, a server address).
	Title string
	// Width and Height are the size of the sea in millimetres.
	Width, Height int32
	Islands       []broadside.Island
	// Sectors are the sim shards' rectangles (may be empty).
	Sectors []broadside.Rect
	// TickRate is the number of ticks per second of play.
	TickRate int
}

// VerifyState says whether a recording's state hashes were checked by
// re-simulating it.
type VerifyState int

// Verification states.
const (
	// VerifyNone: there is nothing to verify (a match simulated here, a
	// live server).
	VerifyNone VerifyState = iota
	// VerifyRunning: the recording is being re-simulated.
	VerifyRunning
	// VerifyOK: every recorded hash matched the re-simulation.
	VerifyOK
	// VerifyFailed: a hash did not match, or the recording is damaged.
	VerifyFailed
)

// Verification is a Source's verification status.
type Verification struct {
	State VerifyState
	// Detail says what failed (the first diverging tick and sector, a
	// truncated file), or how far a running verification got.
	Detail string
}

// ErrNoLineage is returned by Why of sources that carry no lineage (a live
// spectator stream).
var ErrNoLineage = errors.New("viewer: this source carries no lineage")

// Source is what a viewer plays: a recording, a match simulated in memory,
// or a live server. Sources are used from one goroutine (the viewer's);
// they may run their own goroutines (verification, a network stream).
type Source interface {
	// World returns the match's fixed geometry.
	World() World
	// Ticks returns the first and the last tick that can be shown. A live
	// source's last tick grows.
	Ticks() (first, last uint64)
	// Frame returns the current frame; it stays valid until the next Seek
	// or Step.
	Frame() *Frame
	// Seek moves to the end of tick, which must be in Ticks().
	Seek(tick uint64) error
	// Step moves one tick forward (an error at the last tick).
	Step() error
	// Verification reports whether the recording's hashes verify.
	Verification() Verification
	// Why answers which commands and which chain of entities entity e's
	// state at the end of tick derives from, following up to depth
	// derivations (see lineage.Index.Why), or ErrNoLineage.
	Why(e lineage.EntityID, tick uint64, depth int) (*lineage.WhyResult, error)
	// Close releases the source.
	Close() error
}

// SinkingSource is implemented by sources that know a ship's history
// exactly; Explain uses it to bound "sunk by" to the hits since the ship
// last came afloat. Other sources get an estimate from the hits' timing.
type SinkingSource interface {
	// AfloatSince returns the first tick of the run afloat that ended when
	// the ship of player sank at tick sunkAt.
	AfloatSince(player uint32, sunkAt uint64) (uint64, bool)
}

// WorldOf describes the world of cfg for the viewer (its map).
func WorldOf(title string, cfg broadside.Config) (World, error) {
	m, err := broadside.MapOf(cfg)
	if err != nil {
		return World{}, err
	}
	return World{Title: title, Width: m.Width, Height: m.Height, Islands: m.Islands, Sectors: m.Sectors, TickRate: broadside.TickRate}, nil
}
