package viewer

import (
	"errors"
	"fmt"

	"github.com/anoptic/broadside/lineage"
)

// ForkPair shows two recordings of one match, an original and a what-if
// fork of it (`broadside replay fork`), one at a time: KeySwitch (Tab in
// the window) switches to the other at the same tick, so the difference
// shows in place. It is a Source: the one shown answers.
type ForkPair struct {
	srcs   [2]Source
	titles [2]string
	cur    int
}

// NewForkPair pairs an original with its fork; the original shows first.
func NewForkPair(original, fork Source) *ForkPair {
	p := &ForkPair{srcs: [2]Source{original, fork}}
	p.titles = [2]string{"original: " + original.World().Title, "fork: " + fork.World().Title}
	return p
}

// Showing returns 0 for the original, 1 for the fork.
func (p *ForkPair) Showing() int { return p.cur }

// Switch shows the other recording at the current tick (clamped to the
// ticks it holds: a fork starts at its snapshot).
func (p *ForkPair) Switch() error {
	tick := p.srcs[p.cur].Frame().Tick
	next := p.srcs[1-p.cur]
	first, last := next.Ticks()
	if err := next.Seek(min(max(tick, first), last)); err != nil {
		return fmt.Errorf("viewer: switch to the %s: %w", p.titles[1-p.cur], err)
	}
	p.cur = 1 - p.cur
	return nil
}

// World implements Source; the title says which recording shows.
func (p *ForkPair) World() World {
	w := p.srcs[p.cur].World()
	w.Title = p.titles[p.cur] + " (Tab: the other)"
	return w
}

func (p *ForkPair) Ticks() (uint64, uint64)    { return p.srcs[p.cur].Ticks() }
func (p *ForkPair) Frame() *Frame              { return p.srcs[p.cur].Frame() }
func (p *ForkPair) Seek(tick uint64) error     { return p.srcs[p.cur].Seek(tick) }
func (p *ForkPair) Step() error                { return p.srcs[p.cur].Step() }
func (p *ForkPair) Verification() Verification { return p.srcs[p.cur].Verification() }
func (p *ForkPair) Why(e lineage.EntityID, tick uint64, depth int) (*lineage.WhyResult, error) {
	return p.srcs[p.cur].Why(e, tick, depth)
}

// Close closes both recordings.
func (p *ForkPair) Close() error { return errors.Join(p.srcs[0].Close(), p.srcs[1].Close()) }
