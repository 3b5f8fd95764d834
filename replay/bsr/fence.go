package bsr

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// fenceMetaName is the metadata name under which a recording that starts
// after lease claims (a fork of a fenced recording, from its snapshot)
// records the fencing state at its base: the epoch of every shard's newest
// claim before its first entry, which its log no longer holds, so that a
// re-simulation from the base accepts the same outputs the original's
// runners did.
const fenceMetaName = "bsr.fences"

// appendFences encodes fences (sorted by shard): version 1, count, then
// shard and epoch of each (uvarints). Base and Seen are not recorded: they
// matter only to the runner of a fenced worker, never to a re-simulation.
func appendFences(b []byte, fs []snapshot.Fence) []byte {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(fs)))
	for _, f := range fs {
		b = binary.AppendUvarint(b, uint64(f.Shard))
		b = binary.AppendUvarint(b, f.Epoch)
	}
	return b
}

// decodeFences decodes what appendFences wrote, for shards shards: at
// most one entry per shard, in increasing shard order, each epoch not 0.
func decodeFences(b []byte, shards uint32) ([]snapshot.Fence, error) {
	bad := func(what string) ([]snapshot.Fence, error) {
		return nil, fmt.Errorf("%w: fences: %s", ErrCorrupt, what)
	}
	orig := b
	if len(b) == 0 || b[0] != 1 {
		return bad("unknown version")
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	n, ok := next()
	// Each entry takes at least two bytes: the count is bounded by the
	// bytes left before anything is allocated.
	if !ok || n > uint64(shards) || n > uint64(len(b))/2 || n > snapshot.MaxFences {
		return bad("malformed count")
	}
	fs := make([]snapshot.Fence, 0, n)
	for range n {
		s, ok1 := next()
		e, ok2 := next()
		if !ok1 || !ok2 || s >= uint64(shards) || e == 0 {
			return bad("malformed entry")
		}
		if k := len(fs); k > 0 && uint64(fs[k-1].Shard) >= s {
			return bad("shards out of order")
		}
		fs = append(fs, snapshot.Fence{Shard: uint32(s), Epoch: e})
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	if string(appendFences(nil, fs)) != string(orig) {
		return bad("not in canonical form") // overlong varints
	}
	return fs, nil
}

// BaseFences returns the fencing state at the recording's base (nil for a
// recording from the start of the world, or of an unfenced world).
func (r *Reader) BaseFences() ([]snapshot.Fence, error) {
	v, ok, err := r.metaValue(fenceMetaName)
	if err != nil || !ok {
		return nil, err
	}
	fs, err := decodeFences(v, r.h.Shards)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.path, err)
	}
	return fs, nil
}

// baseCheckpoint is the checkpoint a re-simulation from the base starts
// at, with the base's fences.
func (r *Reader) baseCheckpoint() (replay.Checkpoint, error) {
	fs, err := r.BaseFences()
	return replay.Checkpoint{Tick: r.base, Pos: r.basePos, Fences: fs}, err
}

// fenceEpochs follows the lease claims of a log as a Runner does: the
// epoch of each shard's newest claim read.
type fenceEpochs map[uint32]uint64

func fenceEpochsOf(fs []snapshot.Fence) fenceEpochs {
	f := fenceEpochs{}
	for _, x := range fs {
		f[x.Shard] = x.Epoch
	}
	return f
}

func (f fenceEpochs) epoch(shard uint32) uint64 { return f[shard] }

// read takes a log entry's envelope: a lease claim with a newer epoch
// fences its shard's older ones out.
func (f fenceEpochs) read(env *wire.Envelope) {
	if replay.IsLeaseClaim(env) && env.Epoch > f[env.Shard] {
		f[env.Shard] = env.Epoch
	}
}

// list returns the state as snapshot fences, in shard order.
func (f fenceEpochs) list() []snapshot.Fence {
	var out []snapshot.Fence
	for s, e := range f {
		if e != 0 {
			out = append(out, snapshot.Fence{Shard: s, Epoch: e})
		}
	}
	slices.SortFunc(out, func(a, b snapshot.Fence) int { return int(int64(a.Shard) - int64(b.Shard)) })
	return out
}

// fencesAt returns the fencing state after log position pos: the base's,
// then the lease claims of the recorded log up to pos (claimIndex).
func (r *Reader) fencesAt(ctx context.Context, pos uint64) ([]snapshot.Fence, error) {
	base, err := r.BaseFences()
	if err != nil {
		return nil, err
	}
	f := fenceEpochsOf(base)
	if pos > r.basePos {
		claims, err := r.claimsTo(ctx, pos)
		if err != nil {
			return nil, err
		}
		for _, c := range claims {
			if c.pos > pos {
				break
			}
			if c.epoch > f[c.shard] {
				f[c.shard] = c.epoch
			}
		}
	}
	return f.list(), nil
}

// claimAt is a lease claim of the recorded log: its position, shard and
// epoch.
type claimAt struct {
	pos   uint64
	shard uint32
	epoch uint64
}

// claimsTo returns the lease claims of the recorded log after the base, in
// log order, at least those up to position pos. The recording keeps no
// index of them (its log is the only word on which claims were made, and
// an index could disagree with it), so the reader reads the command chunks
// once, as far as a caller has needed, and keeps what it found. A seek
// from a snapshot inside a fenced recording needs the claims before it, or
// it would take the outputs of an owner fenced out since the base for
// current, and drop its successor's.
func (r *Reader) claimsTo(ctx context.Context, pos uint64) ([]claimAt, error) {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	if r.claimsPos < r.basePos {
		r.claimsPos = r.basePos
	}
	if pos <= r.claimsPos {
		return r.claims, nil
	}
	// Most chunks hold no claim: their raw bytes say so (the marker of a
	// claim is stored verbatim), and only the others are decoded.
	var buf []byte
	from := r.claimsPos
	for i := sort.Search(len(r.cmds), func(i int) bool { return r.cmds[i].Aux2 > from }); i < len(r.cmds) && r.cmds[i].Aux1 < pos; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := &r.cmds[i]
		raw, err := r.readRawInto(c, buf)
		if err != nil {
			return nil, err
		}
		buf = raw
		if !replay.MayHoldLeaseClaim(raw) {
			continue
		}
		cc, err := r.commandsChunkVerified(c)
		if err != nil {
			return nil, err
		}
		for k, e := range cc.entries {
			if e.Pos > from && e.Pos <= pos && cc.valid[k] && replay.IsLeaseClaim(&cc.envs[k]) {
				r.claims = append(r.claims, claimAt{pos: e.Pos, shard: cc.envs[k].Shard, epoch: cc.envs[k].Epoch})
			}
		}
	}
	r.claimsPos = pos
	return r.claims, nil
}

// Entries returns the recorded log entries after the base, to read (not
// to rebuild the state from, unless BaseTick is 0: see Source).
func (r *Reader) Entries() replay.Source { return r.newEntrySource(r.basePos, ^uint64(0)) }
