package replay

import (
	"context"
	"sync/atomic"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// UpTo passes a Source through up to position Last (then ErrEndOfLog)
// and publishes the position reached (Pos), for progress displays.
type UpTo struct {
	Src  Source
	Last uint64
	pos  atomic.Uint64
}

// Pos returns the position of the last entry passed through (Last once the
// end is reached).
func (p *UpTo) Pos() uint64 { return p.pos.Load() }

// Next implements Source.
func (p *UpTo) Next(ctx context.Context) (msg.Entry, error) {
	if p.pos.Load() >= p.Last {
		return msg.Entry{}, ErrEndOfLog
	}
	e, err := p.Src.Next(ctx)
	if err != nil {
		return e, err
	}
	if e.Pos > p.Last {
		p.pos.Store(p.Last)
		return msg.Entry{}, ErrEndOfLog
	}
	p.pos.Store(e.Pos)
	return e, nil
}
