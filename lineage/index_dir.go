//go:build !js

package lineage

import (
	"context"
	"fmt"
	"os"
)

// IndexDir indexes the lineage of the Pebble store in dir, which must
// exist and hold some.
func IndexDir(ctx context.Context, dir string, opts PebbleOptions) (*Index, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("lineage store %s: %w", dir, err)
	}
	s, err := OpenPebble(dir, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ix, err := LoadIndex(ctx, s)
	if err != nil {
		return nil, err
	}
	if ix.Stats().Ranges == 0 {
		return nil, fmt.Errorf("lineage store %s holds no lineage", dir)
	}
	return ix, nil
}
