package lineage

import (
	"fmt"
	"io"
)

// WriteText writes st for people ('lineage info').
func (st IndexStats) WriteText(w io.Writer) {
	ticks := st.LastTick - st.FirstTick + 1
	fmt.Fprintf(w, "lineage of ticks %d..%d in %d shards: %d ranges, %d bytes (%.0f bytes/tick)\n",
		st.FirstTick, st.LastTick, st.Shards, st.Ranges, st.Bytes, float64(st.Bytes)/float64(ticks))
	fmt.Fprintf(w, "%d entities, %d events (%d derivations), %d input records\n", st.Entities, st.Events, st.Derivations, st.Inputs)
}
