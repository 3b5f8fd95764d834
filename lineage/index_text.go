package lineage

import (
	"context"
	"fmt"
	"io"
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

// WriteText writes st for people ('lineage info').
func (st IndexStats) WriteText(w io.Writer) {
	ticks := st.LastTick - st.FirstTick + 1
	fmt.Fprintf(w, "lineage of ticks %d..%d in %d shards: %d ranges, %d bytes (%.0f bytes/tick)\n",
		st.FirstTick, st.LastTick, st.Shards, st.Ranges, st.Bytes, float64(st.Bytes)/float64(ticks))
	fmt.Fprintf(w, "%d entities, %d events (%d derivations), %d input records\n", st.Entities, st.Events, st.Derivations, st.Inputs)
}
