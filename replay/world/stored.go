package world

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/replay"
)

// Stored is a replay.Source over a stopped embedded command log: the Pebble
// shard stores (shard-ID) of a data directory, merged in position order
// up to the highest stable position any of them knows.
type Stored struct {
	dir    string
	stores []*shardstore.Pebble
	last   uint64 // highest stable position
	next   uint64
	buf    []msg.Entry
	bi     int
}

// OpenStored opens the stores of the embedded log of a stopped server in
// dir (or in dir/log). It fails if the log is in use, was trimmed, or
// holds no stable entry.
//
// It reads the shards' stable prefix only. After a server was killed
// rather than stopped, commands it acknowledged just before may still be
// durable only in the sequencing replicas' write-ahead logs, not yet
// bound to positions: starting the server once on dir (its recovery
// orders them) and stopping it brings them into what OpenStored reads.
func OpenStored(dir string, logger *slog.Logger) (*Stored, error) {
	var dirs []string
	for _, d := range []string{dir, filepath.Join(dir, "log")} {
		m, _ := filepath.Glob(filepath.Join(d, "shard-*"))
		if len(m) > 0 {
			dirs, dir = m, d
			break
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s holds no command log (no shard-* stores in it or in its log/)", dir)
	}
	slices.Sort(dirs)
	sl := &Stored{dir: dir, next: 1}
	trimmed := uint64(0)
	for _, d := range dirs {
		st, err := shardstore.Open(d, shardstore.Options{Logger: logger})
		if err != nil {
			sl.Close()
			if strings.Contains(err.Error(), "lock") {
				return nil, fmt.Errorf("%s is in use: stop the server first, or read its running log through the server (%v)", d, err)
			}
			return nil, err
		}
		sl.stores = append(sl.stores, st)
		meta, err := st.Meta()
		if err != nil {
			sl.Close()
			return nil, err
		}
		sl.last = max(sl.last, meta.StableGP)
		trimmed = max(trimmed, meta.Trimmed)
	}
	if trimmed > 0 {
		sl.Close()
		return nil, fmt.Errorf("the log in %s was trimmed up to position %d: a recording needs the log from the start of the world", dir, trimmed)
	}
	if sl.last == 0 {
		sl.Close()
		return nil, fmt.Errorf("the log in %s holds no stable entry", dir)
	}
	return sl, nil
}

// Next returns the next entry in position order, replay.ErrEndOfLog after
// the last stable one.
func (sl *Stored) Next(ctx context.Context) (msg.Entry, error) {
	if sl.bi < len(sl.buf) {
		e := sl.buf[sl.bi]
		sl.bi++
		return e, nil
	}
	if err := ctx.Err(); err != nil {
		return msg.Entry{}, err
	}
	if sl.next > sl.last {
		return msg.Entry{}, replay.ErrEndOfLog
	}
	to := min(sl.last, sl.next+4095)
	sl.buf, sl.bi = sl.buf[:0], 0
	for _, st := range sl.stores {
		if err := st.Scan(sl.next, to, func(e msg.Entry) bool { sl.buf = append(sl.buf, e); return true }); err != nil {
			return msg.Entry{}, err
		}
	}
	slices.SortFunc(sl.buf, func(a, b msg.Entry) int { return cmp.Compare(a.Pos, b.Pos) })
	for i, e := range sl.buf {
		if e.Pos != sl.next+uint64(i) {
			return msg.Entry{}, fmt.Errorf("stored log in %s: position %d is missing", sl.dir, sl.next+uint64(i))
		}
	}
	if uint64(len(sl.buf)) != to-sl.next+1 {
		return msg.Entry{}, fmt.Errorf("stored log in %s: position %d is missing", sl.dir, sl.next+uint64(len(sl.buf)))
	}
	sl.next = to + 1
	return sl.Next(ctx)
}

// Last returns the highest stable position of the log.
func (sl *Stored) Last() uint64 { return sl.last }

// Dir returns the directory holding the log's stores.
func (sl *Stored) Dir() string { return sl.dir }

// Close closes the stores.
func (sl *Stored) Close() {
	for _, st := range sl.stores {
		st.Close()
	}
	sl.stores = nil
}
