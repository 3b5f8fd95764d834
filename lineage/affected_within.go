package lineage

import (
	"errors"
	"fmt"
)

// AffectedWithin is Affected through tick until or, with until 0 and
// ticks not 0, through ticks after the tick of the record at pos ('lineage
// affected --until|--ticks'); its errors say what the store lacks.
func (ix *Index) AffectedWithin(pos, until, ticks uint64) (*AffectedResult, error) {
	through := until
	if through == 0 && ticks > 0 {
		c, ok := ix.Command(pos)
		if !ok {
			return nil, fmt.Errorf("no record at position %d in the lineage store", pos)
		}
		through = c.Tick + ticks
	}
	r, err := ix.Affected(pos, through)
	if errors.Is(err, ErrUnknownCommand) {
		return nil, fmt.Errorf("the record at position %d was applied to no entity in the stored lineage", pos)
	}
	return r, err
}
