package bsr

import "time"

// Info describes a recording (for `broadside replay info`).
type Info struct {
	Path      string
	Header    Header
	FileBytes int64
	// Indexed is false for a recording recovered by scanning (its writer
	// did not close it); Truncated then says what was cut.
	Indexed   bool
	Truncated string
	// BaseTick, FirstTick and LastTick: see the Reader's methods. Ticks
	// is the number of ticks recorded, Duration their play time.
	BaseTick, FirstTick, LastTick uint64
	Ticks                         uint64
	Duration                      time.Duration
	// FirstPos and LastPos are the log positions of the recorded entries.
	FirstPos, LastPos uint64
	// Chunks counts chunks and bytes by kind.
	Chunks []KindInfo
	// FullSnapshots and DeltaSnapshots count snapshots over all shards;
	// SnapshotEvery and FullEvery are the mean ticks between a shard's
	// snapshots and between its full snapshots.
	FullSnapshots, DeltaSnapshots int
	SnapshotEvery, FullEvery      float64
	// LineageRanges counts the lineage chunks.
	LineageRanges int
	// BytesPerMinute is the file's size per minute of play.
	BytesPerMinute float64
}

// KindInfo counts one kind of chunk.
type KindInfo struct {
	Kind   string
	Chunks int
	// Raw is the uncompressed payload; Stored the bytes in the file
	// (chunk headers and checksums included).
	Raw, Stored int64
}

// Info describes the recording.
func (r *Reader) Info() Info {
	in := Info{
		Path: r.path, Header: r.h, FileBytes: r.size, Indexed: r.indexed, Truncated: r.truncated,
		BaseTick: r.base, FirstTick: r.FirstTick(), LastTick: r.last, Ticks: r.last - r.base,
		LineageRanges: len(r.lineage),
	}
	if r.h.TickRate > 0 {
		in.Duration = time.Duration(in.Ticks) * time.Second / time.Duration(r.h.TickRate)
	}
	if len(r.cmds) > 0 {
		in.FirstPos, in.LastPos = r.cmds[0].Aux1+1, r.cmds[len(r.cmds)-1].Aux2
	}
	by := map[ChunkKind]*KindInfo{}
	for _, c := range r.refs {
		k := by[c.Kind]
		if k == nil {
			k = &KindInfo{Kind: c.Kind.String()}
			by[c.Kind] = k
		}
		k.Chunks++
		k.Raw += int64(c.Raw)
		k.Stored += c.size()
		if c.Kind == KindSnapshot {
			if c.Flags&FlagFull != 0 {
				in.FullSnapshots++
			} else {
				in.DeltaSnapshots++
			}
		}
	}
	for _, k := range []ChunkKind{KindCommands, KindTicks, KindSnapshot, KindLineage, KindMeta, KindTree, KindCheckpoint, KindFields} {
		if v, ok := by[k]; ok {
			in.Chunks = append(in.Chunks, *v)
		}
	}
	if shards := float64(r.h.Shards); in.Ticks > 0 && shards > 0 {
		if n := float64(in.FullSnapshots+in.DeltaSnapshots) / shards; n > 0 {
			in.SnapshotEvery = float64(in.Ticks) / n
		}
		if n := float64(in.FullSnapshots) / shards; n > 0 {
			in.FullEvery = float64(in.Ticks) / n
		}
	}
	if m := in.Duration.Minutes(); m > 0 {
		in.BytesPerMinute = float64(r.size) / m
	}
	return in
}
