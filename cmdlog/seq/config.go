package seq

import (
	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// Durability selects when a replica acknowledges an append.
type Durability uint8

const (
	// Memory acknowledges once the record is in the replica's memory (as in
	// the LazyLog paper): an acknowledged append survives as long as one
	// replica of the view that acknowledged it survives.
	Memory Durability = iota
	// Fsync acknowledges only after the record is in the replica's
	// write-ahead log on disk (the driver syncs Ready.Persist before
	// sending Ready.Messages): an acknowledged append survives the crash of
	// every replica.
	Fsync
)

// Config parameterises a Replica. Times are in ticks.
type Config struct {
	ID msg.NodeID
	// Layout maps positions to shards.
	Layout msg.Layout
	// Replicas are the cluster's configured sequencing replicas: the only
	// ids that may join, lead, flush or be members of a view. Empty means
	// every id below the lowest shard (replicas 1, 2, ..., shards from 101).
	Replicas []msg.NodeID
	// Durability selects memory or fsync acknowledgement.
	Durability Durability
	// BatchSize caps the records the leader orders in one batch.
	BatchSize int
	// MaxInflightBatches caps ordering batches in flight (pipelining).
	MaxInflightBatches int
	// OrderDelayTicks lets the leader wait up to this many ticks for more
	// records before it orders a batch smaller than BatchSize (0: order at
	// once). Appends do not wait for ordering, reads of the newest records
	// do: a tick of delay turns a round per append at low load (a Store and
	// its sync on a shard, a GC and its sync on every follower in fsync
	// durability) into a round per tick. A parked CheckTail orders at once.
	// 0 means the default, 1 tick in both durabilities (measured in fsync
	// durability: half the messages and CPU per append at one appender; in
	// memory durability, session 12: 7% fewer messages per append at one
	// appender, and the ordering rounds' shard syncs no longer land
	// between most appends, which halved the 1-appender mean of `bench
	// log --quick` on a loaded machine); negative orders at once.
	OrderDelayTicks int
	// HeartbeatTicks is the leader's heartbeat interval.
	HeartbeatTicks int
	// SuspectTicks: a peer silent this long is considered failed.
	SuspectTicks int
	// RetryTicks: unacknowledged messages are resent after this long.
	RetryTicks int
	// TakeoverTicks: a view change that made no visible progress this long
	// may be taken over by another surviving replica.
	TakeoverTicks int
	// CheckpointRecords: in fsync durability, once this many records were
	// written to the WAL (appended or GC'd) since the last checkpoint, and
	// at least twice the records the replica holds (a checkpoint's size), the
	// replica persists a PersistCheckpoint, and the driver may delete
	// every operation before it: the WAL, and so a restart's recovery,
	// stays bounded however long the log runs. 0 means the default (16384);
	// negative: never.
	CheckpointRecords int
	// MaxHeldBytes caps the record bytes a replica holds that are not yet
	// stable (its unordered log and its ordered, unstable entries): beyond
	// it, appends are refused with RejectBusy (nothing stored, the client
	// retries), so that while shards are down the replica's memory stays
	// bounded. A record the pending GC of the leader names is always
	// accepted (otherwise a full follower could never catch up). 0 means
	// the default, 256 MiB; an append to an empty replica is always
	// accepted.
	MaxHeldBytes int64
	// LeaseViews is L, the clients' dedup lease in views (cmdlog/dedup):
	// a client's marks stored in view V are carried through the change to
	// view V+L-1 and expire at the change to V+L. The clients must use the
	// same value (clientcore.Config.LeaseViews). 0 means
	// dedup.DefaultLeaseViews.
	LeaseViews int
	// MaxClients caps the clients whose dedup marks this replica holds: a
	// full table refuses a new client's records busy (nothing of them
	// stored; other clients' records in the same Append go on),
	// unless the leader's pending GC names it, and a leader that refuses
	// one starts a view change with the same members (at most once per 10
	// x SuspectTicks), so that leases run out even when nothing fails. A
	// view record then carries at most 2 x MaxClients marks. 0 means
	// dedup.DefaultMaxClients; at most dedup.MaxExportClients/2, and at
	// most what dedup.MaxExportBytes holds with DedupWindow (5,825 with
	// the default window). Each player session of the game server is a
	// client: a cluster serves that many sessions active within a lease.
	MaxClients int
	// DedupWindow caps how far above its mark a client's ids may be (ids
	// further up are refused busy until the ones below arrive or the
	// client's floor passes them). 0 means dedup.DefaultWindow.
	DedupWindow int
	// Bugs injects known protocol bugs, to prove that the simulator's
	// checker catches them. Never set outside tests.
	Bugs Bugs
}

// Bugs are deliberately wrong behaviours for checker validation.
type Bugs struct {
	// StableBeforeFollowerGC advances stable-gp as soon as shards acked a
	// batch, without waiting for followers to GC it.
	StableBeforeFollowerGC bool
	// ForgetDedup starts every view with empty deduplication state, so a
	// client's retry in the new view is stored a second time.
	ForgetDedup bool
	// FlushOnlyUnordered makes a view-change flush write only the unordered
	// log, not the ordered-but-unstable records, so it cannot repair what
	// an abandoned flush wrote.
	FlushOnlyUnordered bool
	// CheckpointForgetsDedup writes checkpoints with the deduplication
	// marks the view started with instead of the replica's current table,
	// so a replica recovered from a compacted WAL forgets the records it
	// stored since, and stores a client's resend of one of them again.
	CheckpointForgetsDedup bool
	// EvictByRecency admits every client, and a view change keeps the
	// marks of the MaxClients most recently active ones (what the
	// replicas did before dedup leases): a client quiet while that many
	// others appended is forgotten, and its retry stored a second time.
	EvictByRecency bool
}

func (c *Config) applyDefaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	c.BatchSize = min(c.BatchSize, maxMessageEntries)
	if c.MaxInflightBatches <= 0 {
		c.MaxInflightBatches = 4
	}
	if c.OrderDelayTicks == 0 {
		c.OrderDelayTicks = 1
	}
	if c.LeaseViews <= 0 {
		c.LeaseViews = dedup.DefaultLeaseViews
	}
	if c.MaxClients <= 0 {
		c.MaxClients = dedup.DefaultMaxClients
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = dedup.DefaultWindow
	}
	c.DedupWindow = max(c.DedupWindow, 2)
	// A view record carries at most 2 x MaxClients marks of at most
	// dedup.MaxMarkBytes(DedupWindow) bytes: keep them within the budget.
	c.MaxClients = min(c.MaxClients, dedup.MaxExportClients/2, dedup.MaxExportBytes/(2*dedup.MaxMarkBytes(c.DedupWindow)))
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = 256 << 20
	}
	if c.CheckpointRecords == 0 {
		c.CheckpointRecords = 16384
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 2
	}
	if c.SuspectTicks <= 0 {
		// 300 ms at the default 5 ms tick. A process crash is seen
		// sooner through the mesh's liveness connections (msg.PeerGone);
		// this timeout covers a lost machine or path. 20 ticks (100 ms)
		// suspected live peers on a loaded 2-core machine: 2 to 15 view
		// changes in each fault-free `bench log --sizes 4096` run, each
		// resending batches (docs/benchmarks.md, session 19).
		c.SuspectTicks = 60
	}
	if c.RetryTicks <= 0 {
		c.RetryTicks = 4
	}
	if c.TakeoverTicks <= 0 {
		c.TakeoverTicks = 3 * c.SuspectTicks
	}
}

// PersistKind tags a write-ahead log operation.
type PersistKind uint8

const (
	// PersistStartView: the replica started view View.Number. Persisted in
	// every durability mode, so that a replica that lost its memory never
	// rejoins a view it already served.
	PersistStartView PersistKind = iota + 1
	// PersistRecords: records appended to the unordered log (fsync mode).
	PersistRecords
	// PersistGC: a GC applied by a follower or the leader (fsync mode).
	PersistGC
	// PersistSeal: the current view was sealed (fsync mode).
	PersistSeal
	// PersistCheckpoint: the replica's whole recoverable state (fsync
	// mode). Recover starts over from it, so the driver may delete every
	// operation before the newest checkpoint (in the same synced write
	// that stores it, or later).
	PersistCheckpoint
	// PersistFloor: clients' floors that raised their dedup marks (fsync
	// mode), in the view the replica serves.
	PersistFloor
)

// PersistOp is one write-ahead log operation.
type PersistOp struct {
	Kind       PersistKind
	View       msg.ViewRecord // PersistStartView
	Records    []msg.Record   // PersistRecords
	GC         msg.GC         // PersistGC
	Floor      []msg.RecordID // PersistFloor: (client, floor) pairs
	Checkpoint *Checkpoint    // PersistCheckpoint
}

// Checkpoint is what recovery needs of every WAL operation before it: a
// replica recovered from a WAL that starts at a checkpoint is in the state
// that replaying the whole WAL gives, except that positions up to StableGP,
// which never change, are no longer held (so a view change does not
// rewrite them).
type Checkpoint struct {
	// View is the last view the replica started.
	View   msg.ViewRecord
	Sealed bool
	// Dedup marks every record id the replica stored (cmdlog/dedup): a
	// client's resend of any of them is still recognised after a restart.
	Dedup         []msg.ClientMark
	LastOrderedGP uint64
	// StableGP: positions up to it are stable (durable on the shards).
	StableGP uint64
	// Ordered are the ordered entries at StableGP+1..LastOrderedGP.
	Ordered []msg.Entry
	// Unordered is the unordered log, in arrival order.
	Unordered []msg.Record
}

// Ready is the work a Replica asks its driver to do: make Persist durable,
// then send Messages.
type Ready struct {
	Persist  []PersistOp
	Messages []msg.Envelope
}

// Role is what a replica does in its view.
type Role uint8

const (
	// RoleNone: the replica serves no view (new, restarted after losing
	// memory, or removed from the view).
	RoleNone Role = iota
	// RoleFollower: a member of the active view.
	RoleFollower
	// RoleLeader: the member that orders the view's records.
	RoleLeader
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleLeader:
		return "leader"
	}
	return "none"
}
