package pebbledb

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category Pebble v2.1.7 creates (and recycles)
// its write-ahead log files with.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// markWAL marks f, a guardFile, as one of Pebble's write-ahead logs if c
// says it is.
func markWAL(f vfs.File, c vfs.DiskWriteCategory) vfs.File {
	if g, ok := f.(guardFile); ok && c == walCategory {
		g.wal = true
		return g
	}
	return f
}

// extendWAL makes a write-ahead log file at least size bytes long, after
// Pebble preallocated the blocks up to size (with FALLOC_FL_KEEP_SIZE,
// which leaves the file's size alone), by writing one zero byte at its
// end.
//
// Why: a synced commit appends to the WAL, and on ext4 an fdatasync that
// follows a write past the end of the file must also commit the new file
// size to the journal, while one that follows a write inside the file
// only flushes the data. Measured on this project's 2-core VM (ext4 on
// virtio): 115–165 µs and 55 µs of CPU per 150-byte write+fdatasync when
// the file grows, 90–100 µs and 33 µs inside it; 3 Pebble instances
// syncing at once (the 3 sequencing replicas of an fsync-durability
// append), p50 360–440 µs against 265–295 µs. Pebble gets the cheap case
// itself only for recycled WAL files (its log recycler reuses them for
// that reason), so a database's first few WALs, which are all a short
// run writes, always paid for the growth.
//
// It is safe because Pebble's WAL reader already expects zeros after the
// last record: its own preallocation and recycled files leave them, and a
// zeroed chunk with no valid record after it reads as the end of the log
// (replayWAL tolerates it in the newest WAL; an older WAL ends with an EOF
// trailer before the zeros). On a file system without a file descriptor
// (vfs.NewMem and the tests' crash-cloning file systems) it does nothing.
func extendWAL(f vfs.File, size int64) error {
	if f.Fd() == vfs.InvalidFd || size <= 0 {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("pebbledb: extend wal: %w", err)
	}
	if st.Size() >= size {
		return nil // a recycled file, already as long
	}
	if _, err := f.WriteAt([]byte{0}, size-1); err != nil {
		return fmt.Errorf("pebbledb: extend wal: %w", err)
	}
	return nil
}
