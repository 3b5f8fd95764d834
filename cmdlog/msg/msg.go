// Package msg defines the messages exchanged by the cmdlog protocol cores
// (sequencing replicas, the orderer, shards, clients and the view
// coordinator). The cores speak these Go values; drivers encode them on the
// wire with netcode/wire (see cmdlog/codec) and the deterministic simulator
// passes them by value.
//
// Every message is addressed with an Envelope. A message never carries its
// sender's identity in its body: the envelope (filled in by the transport
// from the authenticated connection) does.
package msg

import "fmt"

// NodeID names one process of a cmdlog cluster: a sequencing replica, a
// shard, a client, or the coordinator.
type NodeID uint32

// Coordinator is the well-known address of the view coordinator. Cores send
// CoordGet and CoordCAS to it; drivers route these to a coord.Coordinator.
const Coordinator NodeID = 0xFFFFFFFF

// RecordID identifies one append for deduplication: the producing client and
// its request sequence number. Request numbers of a client start at 1 and
// increase; a retry reuses the id.
type RecordID struct {
	Client uint64
	Seq    uint64
}

func (id RecordID) String() string { return fmt.Sprintf("%d/%d", id.Client, id.Seq) }

// Record is an appended payload with its deduplication id.
type Record struct {
	ID   RecordID
	Data []byte
}

// Entry is a record bound to a log position.
type Entry struct {
	Pos    uint64
	Record Record
}

// Message is any protocol message.
type Message interface {
	Kind() Kind
}

// Envelope is a message with its source and destination.
type Envelope struct {
	From, To NodeID
	Msg      Message
}

func (e Envelope) String() string {
	return fmt.Sprintf("%d->%d %s%+v", e.From, e.To, e.Msg.Kind(), e.Msg)
}

// Kind enumerates message types. Values are part of the wire format.
type Kind uint8

const (
	KindAppend Kind = iota + 1
	KindAppendAck
	KindAppendReject
	KindStore
	KindStoreAck
	KindStoreReject
	KindGC
	KindGCAck
	KindStableGP
	KindHeartbeat
	KindHeartbeatAck
	KindRead
	KindReadResp
	KindCheckTail
	KindTailResp
	KindTrim
	KindTrimAck
	KindSeal
	KindSealAck
	KindStartView
	KindJoin
	KindCoordGet
	KindCoordCAS
	KindCoordResp
	kindEnd
)

// KindLinkUp is the kind of LinkUp, which never goes on the wire (Valid
// reports false for it).
const KindLinkUp Kind = 0xFF

// KindPeerGone is the kind of PeerGone, which never goes on the wire
// either.
const KindPeerGone Kind = 0xFE

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k >= KindAppend && k < kindEnd }

var kindNames = [...]string{"", "Append", "AppendAck", "AppendReject", "Store", "StoreAck",
	"StoreReject", "GC", "GCAck", "StableGP", "Heartbeat", "HeartbeatAck", "Read", "ReadResp",
	"CheckTail", "TailResp", "Trim", "TrimAck", "Seal", "SealAck", "StartView", "Join",
	"CoordGet", "CoordCAS", "CoordResp"}

func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	switch k {
	case KindLinkUp:
		return "LinkUp"
	case KindPeerGone:
		return "PeerGone"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Append asks a sequencing replica to store records durably in view View.
// A client sends it to every member of the view; the append is complete
// when every member acknowledged it.
//
// Floors carries the senders' dedup floors: a Floor{Client: C, Seq: F}
// says that every id of client C below F is complete (acknowledged by
// every replica of some view) or abandoned (reported to its producer as
// ErrOutcomeUnknown, never sent again), so a replica may raise C's mark
// to F-1 and close the gaps abandoned appends leave. Only the producer
// of C's ids may say so.
type Append struct {
	View    uint64
	Records []Record
	Floors  []RecordID
}

// AppendAck acknowledges that the replica holds (or has already ordered) the
// records with these ids in view View.
type AppendAck struct {
	View uint64
	IDs  []RecordID
}

// RejectReason says why a replica refused an append.
type RejectReason uint8

const (
	// RejectWrongView: the append named a view the replica is not serving.
	RejectWrongView RejectReason = iota + 1
	// RejectSealed: the replica's view is sealed for a view change.
	RejectSealed
	// RejectNoView: the replica has not (re)joined any view yet.
	RejectNoView
	// RejectBusy: the replica holds as many unordered bytes as it may (the
	// shards are down or slow); the client retries later. Nothing was
	// stored.
	RejectBusy
)

// AppendReject refuses an append; View is the replica's current view (0 if
// none). The client refreshes its view from the coordinator and retries.
type AppendReject struct {
	View   uint64
	Reason RejectReason
	IDs    []RecordID
}

// Store writes positioned entries to a shard (an order batch from the
// leader, or a flush during a view change). Epoch fences stale writers: a
// shard rejects a Store whose Epoch is below the highest epoch it has seen.
// If Truncate is set, after writing the entries the shard deletes every
// position above TruncateAbove it holds (the tail a dead view may have left).
type Store struct {
	Epoch         uint64
	Batch         uint64
	Entries       []Entry
	Truncate      bool
	TruncateAbove uint64
}

// StoreAck acknowledges that a Store is durable on the shard.
type StoreAck struct {
	Epoch uint64
	Batch uint64
}

// StoreReject refuses a Store from an older epoch; Epoch is the shard's.
type StoreReject struct {
	Epoch uint64
	Batch uint64
}

// GC tells a follower that the records IDs were ordered at positions
// FromGP..ToGP: drop them from the unordered log, remember them as seen, and
// raise last-ordered-gp to ToGP.
type GC struct {
	View   uint64
	FromGP uint64
	ToGP   uint64
	IDs    []RecordID
}

// GCAck acknowledges a GC; LastOrderedGP is the follower's value after it.
type GCAck struct {
	View          uint64
	LastOrderedGP uint64
}

// StableGP announces that every position up to GP is stable: it will never
// change and may be served to readers.
type StableGP struct {
	Epoch uint64
	GP    uint64
}

// Heartbeat is sent by the leader to followers; followers answer with
// HeartbeatAck. Missing heartbeats trigger a view change. StableGP tells
// followers which ordered records they no longer need to keep for a flush.
type Heartbeat struct {
	View          uint64
	LastOrderedGP uint64
	StableGP      uint64
}

// HeartbeatAck answers a Heartbeat.
type HeartbeatAck struct {
	View          uint64
	LastOrderedGP uint64
}

// Read asks a shard for stable entries starting at From, at most Max of
// them, all on the same stripe as From. Reads above stable-gp park until
// stable-gp passes From.
type Read struct {
	ReqID uint64
	From  uint64
	Max   uint32
}

// ReadErr is the outcome of a read.
type ReadErr uint8

const (
	ReadOK ReadErr = iota
	// ReadTrimmed: From is at or below the trimmed prefix.
	ReadTrimmed
	// ReadNotOwner: the shard does not own position From.
	ReadNotOwner
)

// ReadResp answers a Read with consecutive entries from From. Entries is
// never empty when Err is ReadOK.
type ReadResp struct {
	ReqID    uint64
	Err      ReadErr
	StableGP uint64
	Trimmed  uint64
	Entries  []Entry
}

// CheckTail asks the leader for the tail of the log.
type CheckTail struct {
	ReqID uint64
}

// TailResp answers CheckTail. Tail is the number of positions the log holds
// after every append that completed before the CheckTail was sent; every
// position up to Tail is stable when the answer is given.
type TailResp struct {
	ReqID    uint64
	OK       bool // false: not the leader, retry with a fresh view
	View     uint64
	Tail     uint64
	StableGP uint64
}

// Trim asks a shard to discard every position up to and including UpTo.
type Trim struct {
	ReqID uint64
	UpTo  uint64
}

// TrimAck answers Trim with the shard's trimmed prefix after it.
type TrimAck struct {
	ReqID     uint64
	TrimmedTo uint64
}

// Seal tells a replica to stop accepting appends in View (a view change is
// under way).
type Seal struct {
	View uint64
}

// SealAck acknowledges a Seal.
type SealAck struct {
	View uint64
}

// StartView tells a replica that View is active; replicas also learn it from
// the coordinator.
type StartView struct {
	View ViewRecord
}

// Join is sent by a replica with no state (new, or restarted after losing
// memory) to the leader, asking to be added to the next view.
// LastStartedView is the highest view the replica ever started: a member of
// the current view that never started it only needs the view record, while
// one that started it and lost its memory needs a new view.
type Join struct {
	LastStartedView uint64
}

// LinkUp is delivered by a node's own transport, never sent over the
// network: a new link to the node in Envelope.From was just established
// (it restarted, or the previous connection died). Whatever was in flight
// to it may be lost, so a core resends what it still waits for from that
// node now, instead of at its next retransmission timeout (which backs off
// while the node is down).
type LinkUp struct{}

// PeerGone is delivered by a node's own transport, never sent over the
// network: the process of the node in Envelope.From ended (its kernel
// closed the liveness connection the transport held to it: a crash, a
// SIGKILL or an exit). A core may suspect that node at once instead of
// after its silence timeout. The report can be false (a connection reset
// by the network), so acting on it must be as safe as a false timeout.
type PeerGone struct{}

// CoordGet reads the view record.
type CoordGet struct {
	ReqID uint64
}

// CoordCAS replaces the view record if its revision is still ExpectRev
// (0: create).
type CoordCAS struct {
	ReqID     uint64
	ExpectRev uint64
	View      ViewRecord
}

// CoordResp answers CoordGet and CoordCAS with the record now stored.
type CoordResp struct {
	ReqID uint64
	OK    bool
	Rev   uint64
	View  ViewRecord
}

// ViewRecord is the coordinator's record of the sequencing layer's
// configuration. When Change is nil, view Number is active with Members led
// by Leader, and its replicas start with LastOrderedGP = StartGP and the
// deduplication state Dedup. When Change is set, a view change to
// Change.Epoch is under way, flushed by Change.Flusher; the fields describe
// the last active view, whose surviving members may take the change over.
type ViewRecord struct {
	Number  uint64
	Members []NodeID
	Leader  NodeID
	StartGP uint64
	Dedup   []ClientMark
	Change  *ViewChange
}

// ViewChange describes a view change in progress.
type ViewChange struct {
	Epoch      uint64
	Flusher    NodeID
	NewMembers []NodeID
}

// ClientMark is one client's deduplication state: every request id up to
// Mark has been seen, and so have the ids in Above (all > Mark, ascending).
// View is the last view in which one of the client's appends was stored
// (or its floor raised): the client's lease, which the marks keep for
// dedup.DefaultLeaseViews views after it (see cmdlog/dedup).
type ClientMark struct {
	Client uint64
	Mark   uint64
	Above  []uint64
	View   uint64
}

// Active reports whether the record describes an active view.
func (v *ViewRecord) Active() bool { return v.Change == nil }

// HasMember reports whether id is a member of the active view.
func (v *ViewRecord) HasMember(id NodeID) bool {
	for _, m := range v.Members {
		if m == id {
			return true
		}
	}
	return false
}

// Epoch is the highest epoch the record names.
func (v *ViewRecord) Epoch() uint64 {
	if v.Change != nil {
		return v.Change.Epoch
	}
	return v.Number
}

// Clone returns a deep copy.
func (v ViewRecord) Clone() ViewRecord {
	c := v
	c.Members = append([]NodeID(nil), v.Members...)
	c.Dedup = make([]ClientMark, len(v.Dedup))
	for i, d := range v.Dedup {
		c.Dedup[i] = ClientMark{Client: d.Client, Mark: d.Mark, Above: append([]uint64(nil), d.Above...), View: d.View}
	}
	if v.Change != nil {
		ch := *v.Change
		ch.NewMembers = append([]NodeID(nil), v.Change.NewMembers...)
		c.Change = &ch
	}
	return c
}

func (Append) Kind() Kind       { return KindAppend }
func (AppendAck) Kind() Kind    { return KindAppendAck }
func (AppendReject) Kind() Kind { return KindAppendReject }
func (Store) Kind() Kind        { return KindStore }
func (StoreAck) Kind() Kind     { return KindStoreAck }
func (StoreReject) Kind() Kind  { return KindStoreReject }
func (GC) Kind() Kind           { return KindGC }
func (GCAck) Kind() Kind        { return KindGCAck }
func (StableGP) Kind() Kind     { return KindStableGP }
func (Heartbeat) Kind() Kind    { return KindHeartbeat }
func (HeartbeatAck) Kind() Kind { return KindHeartbeatAck }
func (Read) Kind() Kind         { return KindRead }
func (ReadResp) Kind() Kind     { return KindReadResp }
func (CheckTail) Kind() Kind    { return KindCheckTail }
func (TailResp) Kind() Kind     { return KindTailResp }
func (Trim) Kind() Kind         { return KindTrim }
func (TrimAck) Kind() Kind      { return KindTrimAck }
func (Seal) Kind() Kind         { return KindSeal }
func (SealAck) Kind() Kind      { return KindSealAck }
func (StartView) Kind() Kind    { return KindStartView }
func (Join) Kind() Kind         { return KindJoin }
func (CoordGet) Kind() Kind     { return KindCoordGet }
func (CoordCAS) Kind() Kind     { return KindCoordCAS }
func (CoordResp) Kind() Kind    { return KindCoordResp }
func (LinkUp) Kind() Kind       { return KindLinkUp }
func (PeerGone) Kind() Kind     { return KindPeerGone }

// Layout maps log positions to shards: positions are striped across Shards
// in runs of StripeUnit consecutive positions. Positions start at 1.
type Layout struct {
	Shards     []NodeID
	StripeUnit uint64
}

// ShardIndex returns the index in Shards of the shard owning pos (pos >= 1).
func (l Layout) ShardIndex(pos uint64) int {
	return int(((pos - 1) / l.StripeUnit) % uint64(len(l.Shards)))
}

// ShardOf returns the shard owning pos.
func (l Layout) ShardOf(pos uint64) NodeID { return l.Shards[l.ShardIndex(pos)] }

// StripeEnd returns the last position of the stripe run containing pos.
func (l Layout) StripeEnd(pos uint64) uint64 {
	return ((pos-1)/l.StripeUnit + 1) * l.StripeUnit
}
