package replay

import (
	"bytes"
	"errors"
	"hash/fnv"
	"slices"

	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/snapshot"
)

// ErrFenced is returned by a Runner that read a lease claim of its shard
// with an epoch above its own (RunnerConfig.Epoch): another worker owns
// the shard now, so this one stops at once, appending nothing more.
var ErrFenced = errors.New("replay: runner fenced out by a newer lease")

// ErrSnapshotAheadOfFence is returned by a fenced Runner started from a
// snapshot that counts outputs its shard's previous owner appended after
// this runner's lease claim (they are stale, so nobody applied them, and a
// runner starting after their tick would never produce them again): the
// shard must be restored from an older snapshot, or from the start.
var ErrSnapshotAheadOfFence = errors.New("replay: snapshot counts outputs the lease claim fenced out")

// leaseClaimPayload marks a Control envelope as a sector lease claim.
const leaseClaimPayload = "BSLC"

// LeaseClaimRecord returns the log record a worker appends when it has
// claimed shard's lease at epoch (before it runs the shard): from its
// position on, every Runner of the world accepts the shard's outputs of
// that epoch only. Appending it twice is harmless.
func LeaseClaimRecord(shard uint32, epoch uint64) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeControl, Shard: shard, Epoch: epoch, Payload: []byte(leaseClaimPayload)})
}

// isLeaseClaim reports whether env (verified) is a lease claim.
func isLeaseClaim(env *wire.Envelope) bool {
	return env.Kind == wire.EnvelopeControl && env.Epoch != 0 && string(env.Payload) == leaseClaimPayload
}

// MayHoldLeaseClaim reports whether b, any bytes that hold log records
// verbatim (a recording's commands chunk), may hold a lease claim: a claim
// record carries its marker as is, so false means none. A prefilter for
// scans that look for claims only.
func MayHoldLeaseClaim(b []byte) bool { return bytes.Contains(b, []byte(leaseClaimPayload)) }

// IsLeaseClaim reports whether env (verified) is a lease claim
// (LeaseClaimRecord): of shard env.Shard at epoch env.Epoch.
func IsLeaseClaim(env *wire.Envelope) bool { return isLeaseClaim(env) }

// OutputSource returns the shard whose output a migration envelope with
// record client id client is, as a Runner reads it: env.Source for a
// fenced output (env.Epoch != 0), else the shard of an unfenced output's
// client id (OutputClientID), or BroadcastShard for any other id.
func OutputSource(env *wire.Envelope, client uint64) uint32 {
	if env.Epoch != 0 {
		return env.Source
	}
	return sourceOf(client)
}

// StaleOutput reports whether a Runner whose fence table gives epoch(s),
// the newest lease claim of shard s it read (0: none), ignores the
// migration envelope env with record client id client as stale: a fenced
// output of another epoch than its shard's newest claim, or an unfenced
// output of a shard that is fenced.
func StaleOutput(env *wire.Envelope, client uint64, epoch func(shard uint32) uint64) bool {
	if env.Epoch == 0 && epoch(sourceOf(client)) == 0 {
		return false
	}
	return epoch(OutputSource(env, client)) != env.Epoch
}

// FencedOutputClientID is the deduplication client id of the outputs of
// shard in world produced under lease epoch: each epoch has its own, so a
// stale owner's copy of an output never takes the place of the current
// owner's in the log (the log would drop the second as a duplicate). Its
// request ids count from 1 within the epoch: output k is request k-Base,
// Base being the shard's valid outputs before the claim. The id is a hash
// (48 bits below the engine tag and kind).
func FencedOutputClientID(world, shard uint32, epoch uint64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	for i := range 4 {
		b[i] = byte(world >> (8 * i))
		b[4+i] = byte(shard >> (8 * i))
	}
	for i := range 8 {
		b[8+i] = byte(epoch >> (8 * i))
	}
	h.Write(b[:])
	return engineClientTag | fencedOutputClientKind | h.Sum64()&(1<<48-1)
}

// fenceTable is a Runner's fencing state: per source shard, the epoch of
// its newest lease claim read (absent: 0, unfenced) and, for the runner's
// own shard, the number of its valid outputs before that claim.
type fenceTable map[uint32]snapshot.Fence

func fenceTableOf(fs []snapshot.Fence) fenceTable {
	t := fenceTable{}
	for _, f := range fs {
		t[f.Shard] = f
	}
	return t
}

// list returns the table in shard order (a snapshot's Fences).
func (t fenceTable) list() []snapshot.Fence {
	if len(t) == 0 {
		return nil
	}
	out := make([]snapshot.Fence, 0, len(t))
	for _, f := range t {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b snapshot.Fence) int {
		switch {
		case a.Shard < b.Shard:
			return -1
		case a.Shard > b.Shard:
			return 1
		}
		return 0
	})
	return out
}
