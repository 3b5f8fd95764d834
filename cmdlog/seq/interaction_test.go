package seq_test

// Interaction tests in the style of etcd raft's: each file under
// testdata/ is a script of commands run against a small cluster of
// sequencing replicas (ids 1..n), real shard cores on in-memory stores
// (ids 101..), an in-memory coordinator and clients that are only
// addresses. Messages are queued and delivered only when a command says
// so, so a script pins down exactly which messages each step causes.
// After a deliberate change, regenerate the expectations with
//
//	go test ./cmdlog/seq -run TestInteraction -rewrite
//
// and read the diff.
//
// Commands:
//
//	bootstrap replicas=3 shards=2 [stripe=N] [durability=fsync] [batch=N] [suspect=N] [checkpoint=N] [held=BYTES]
//	          [clients=N] [window=N] [lease=N] [order-delay=N]
//	                                     (order-delay: Config.OrderDelayTicks; default: -1, order at once, in
//	                                     memory durability, the default in fsync)
//	                                     (clients, window, lease: Config.MaxClients, DedupWindow, LeaseViews)
//	                                     (checkpoint: Config.CheckpointRecords; default: none in a script;
//	                                     a replica's WAL drops what precedes a checkpoint, as cmdlog/wal does)
//	append client=C ids=1,2,3 [to=1,2] [floor=F]
//	                                     an Append from client C to the replicas (default: the view),
//	                                     with C's floor F (every id of C below F complete or abandoned)
//	                                     [also=C2]: the same ids of client C2 in the same message
//	deliver [to=X] [from=X] [kind=K] [n=N]
//	                                     deliver queued messages that match, in order, then run every
//	                                     touched node's Ready; prints what was delivered
//	stabilize                            deliver until nothing is queued
//	tick [n=N] [nodes=1,2] [settle]      tick replicas (default: all live ones) n times
//	                                     (settle: deliver everything after each tick, silently)
//	crash id=X                           the node loses its memory; messages to it are dropped
//	restart id=X                         a crashed replica comes back empty (memory) or from its WAL (fsync)
//	queue                                print the queued messages
//	state                                print every replica, shard and the coordinator's record
//	wal id=X                             print what replica X persisted
//	forge from=X to=Y kind=K [view=N] [leader=L] [members=1,2] [epoch=N] [truncate-above=N] [rev=N]
//	                                     queue a message X never sent (X >= 1<<24 or c<N>: a client;
//	                                     4294967295: the coordinator's address); kinds StartView, Seal,
//	                                     GC, Join, Heartbeat, Store, StableGP, CoordResp, and PeerGone
//	                                     (the report of Y's own mesh that X's process ended)
//	coord-write view=N leader=L members=1,2 [change-epoch=N flusher=F]
//	                                     overwrite the coordinator's record (a corrupted or hostile record)
//	refused                              print how many messages each node refused

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/cockroachdb/datadriven"
)

const clientBase msg.NodeID = 1 << 24

func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t}
		datadriven.RunTest(t, path, h.run)
	})
}

type replicaNode struct {
	id   msg.NodeID
	core *seq.Replica
	wal  []seq.PersistOp
	// lastStartedView survives a crash in every durability mode.
	lastStartedView uint64
}

type shardNode struct {
	id    msg.NodeID
	core  *shard.Shard
	store *shardstore.Memory
}

type harness struct {
	t        *testing.T
	cfg      seq.Config
	layout   msg.Layout
	replicas []*replicaNode
	shards   []*shardNode
	queue    []msg.Envelope
	coordRev uint64
	coordRec msg.ViewRecord
	out      strings.Builder
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	switch d.Cmd {
	case "bootstrap":
		h.bootstrap(t, d)
	case "append":
		h.appendCmd(t, d)
	case "deliver":
		h.deliver(t, d, false)
	case "stabilize":
		h.deliver(t, d, true)
	case "tick":
		n := intArg(t, d, "n", 1)
		nodes := idsArg(t, d, "nodes")
		for range n {
			for _, r := range h.replicas {
				if r.core != nil && (nodes == nil || slices.Contains(nodes, r.id)) {
					r.core.Tick()
					h.ready(r)
				}
			}
			if d.HasArg("settle") {
				// Deliver everything after each tick, without printing it.
				kept := h.out.String()
				h.deliver(t, d, true)
				h.out.Reset()
				h.out.WriteString(kept)
			}
		}
		fmt.Fprintf(&h.out, "%d queued\n", len(h.queue))
	case "crash":
		id := msg.NodeID(intArg(t, d, "id", 0))
		if r := h.replica(id); r != nil {
			r.core = nil
		} else if s := h.shard(id); s != nil {
			s.core = nil
		} else {
			t.Fatalf("crash: no node %d", id)
		}
		fmt.Fprintf(&h.out, "node %d crashed\n", id)
	case "restart":
		id := msg.NodeID(intArg(t, d, "id", 0))
		if r := h.replica(id); r != nil {
			cfg := h.cfg
			cfg.ID = id
			if cfg.Durability == seq.Fsync {
				r.core = seq.Recover(cfg, r.wal)
			} else {
				r.core = seq.New(cfg, r.lastStartedView)
			}
		} else if s := h.shard(id); s != nil {
			c, err := shard.New(shard.Config{ID: id, Layout: h.layout}, s.store)
			if err != nil {
				t.Fatal(err)
			}
			s.core = c
		}
		fmt.Fprintf(&h.out, "node %d restarted\n", id)
	case "queue":
		for _, e := range h.queue {
			fmt.Fprintf(&h.out, "%s\n", format(e))
		}
	case "state":
		h.state()
	case "forge":
		h.forge(t, d)
	case "coord-write":
		v := msg.ViewRecord{Number: uint64(intArg(t, d, "view", 0)), Leader: msg.NodeID(intArg(t, d, "leader", 0)),
			Members: idsArg(t, d, "members")}
		if d.HasArg("change-epoch") {
			v.Change = &msg.ViewChange{Epoch: uint64(intArg(t, d, "change-epoch", 0)),
				Flusher: msg.NodeID(intArg(t, d, "flusher", 0)), NewMembers: v.Members}
		}
		h.coordRec, h.coordRev = v, h.coordRev+1
		fmt.Fprintf(&h.out, "coordinator: rev %d view %d members %v leader %d\n", h.coordRev, v.Number, v.Members, v.Leader)
	case "refused":
		for _, r := range h.replicas {
			if r.core != nil {
				fmt.Fprintf(&h.out, "replica %d: refused %d\n", r.id, r.core.Refused())
			}
		}
		for _, s := range h.shards {
			if s.core != nil {
				fmt.Fprintf(&h.out, "shard %d: refused %d\n", s.id, s.core.Refused())
			}
		}
	case "wal":
		r := h.replica(msg.NodeID(intArg(t, d, "id", 0)))
		if r == nil {
			t.Fatalf("wal: no replica")
		}
		for _, op := range r.wal {
			switch op.Kind {
			case seq.PersistStartView:
				fmt.Fprintf(&h.out, "start-view %d\n", op.View.Number)
			case seq.PersistRecords:
				var rs []msg.RecordID
				for _, rec := range op.Records {
					rs = append(rs, rec.ID)
				}
				fmt.Fprintf(&h.out, "records %s\n", ids(rs))
			case seq.PersistFloor:
				fmt.Fprintf(&h.out, "floor %s\n", ids(op.Floor))
			case seq.PersistGC:
				fmt.Fprintf(&h.out, "gc %d..%d %s\n", op.GC.FromGP, op.GC.ToGP, ids(op.GC.IDs))
			case seq.PersistSeal:
				fmt.Fprintf(&h.out, "seal\n")
			case seq.PersistCheckpoint:
				cp := op.Checkpoint
				var ord, unord []msg.RecordID
				for _, e := range cp.Ordered {
					ord = append(ord, e.Record.ID)
				}
				for _, rec := range cp.Unordered {
					unord = append(unord, rec.ID)
				}
				fmt.Fprintf(&h.out, "checkpoint view %d sealed=%v last-ordered-gp %d stable-gp %d dedup %v ordered %s unordered %s\n",
					cp.View.Number, cp.Sealed, cp.LastOrderedGP, cp.StableGP, cp.Dedup, ids(ord), ids(unord))
			}
		}
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return h.out.String()
}

func (h *harness) bootstrap(t *testing.T, d *datadriven.TestData) {
	nr, ns := intArg(t, d, "replicas", 3), intArg(t, d, "shards", 2)
	h.layout = msg.Layout{StripeUnit: uint64(intArg(t, d, "stripe", 4))}
	for i := range ns {
		id := msg.NodeID(101 + i)
		h.layout.Shards = append(h.layout.Shards, id)
	}
	h.cfg = seq.Config{Layout: h.layout, BatchSize: intArg(t, d, "batch", 0), SuspectTicks: intArg(t, d, "suspect", 20),
		CheckpointRecords: intArg(t, d, "checkpoint", -1), MaxHeldBytes: int64(intArg(t, d, "held", 0)),
		MaxClients: intArg(t, d, "clients", 0), DedupWindow: intArg(t, d, "window", 0), LeaseViews: intArg(t, d, "lease", 0)}
	if d.HasArg("durability") {
		var v string
		d.ScanArgs(t, "durability", &v)
		if v == "fsync" {
			h.cfg.Durability = seq.Fsync
		}
	}
	// order-delay=N sets Config.OrderDelayTicks; without it a script in
	// memory durability orders at once (what most scripts trace), one in
	// fsync durability has the default.
	switch {
	case d.HasArg("order-delay"):
		h.cfg.OrderDelayTicks = intArg(t, d, "order-delay", 0)
	case h.cfg.Durability != seq.Fsync:
		h.cfg.OrderDelayTicks = -1
	}
	for _, id := range h.layout.Shards {
		st := shardstore.NewMemory()
		c, err := shard.New(shard.Config{ID: id, Layout: h.layout}, st)
		if err != nil {
			t.Fatal(err)
		}
		h.shards = append(h.shards, &shardNode{id: id, core: c, store: st})
	}
	var members []msg.NodeID
	for i := range nr {
		members = append(members, msg.NodeID(1+i))
	}
	// The initial view, as `logd --bootstrap` writes it; every replica
	// learns it from the coordinator.
	h.coordRec, h.coordRev = msg.ViewRecord{Number: 1, Members: members, Leader: members[0]}, 1
	h.cfg.Replicas = members
	for _, id := range members {
		cfg := h.cfg
		cfg.ID = id
		r := &replicaNode{id: id, core: seq.New(cfg, 0)}
		h.replicas = append(h.replicas, r)
	}
	// The replicas learn the view when they poll, on their first tick.
	for _, r := range h.replicas {
		r.core.Tick()
		h.ready(r)
	}
	h.deliver(t, d, true)
	h.out.Reset()
	h.state()
}

func (h *harness) appendCmd(t *testing.T, d *datadriven.TestData) {
	client := intArg(t, d, "client", 1)
	ids := idsArg(t, d, "ids")
	to := idsArg(t, d, "to")
	if to == nil {
		to = h.coordRec.Members
	}
	var recs []msg.Record
	for _, s := range ids {
		recs = append(recs, msg.Record{ID: msg.RecordID{Client: uint64(client), Seq: uint64(s)}, Data: []byte(fmt.Sprintf("c%d-%d", client, s))})
	}
	if also := intArg(t, d, "also", 0); also > 0 {
		// The same ids of a second client in the same message (a server's
		// log client batches many sessions).
		for _, sq := range ids {
			recs = append(recs, msg.Record{ID: msg.RecordID{Client: uint64(also), Seq: uint64(sq)}, Data: []byte(fmt.Sprintf("c%d-%d", also, sq))})
		}
	}
	var floors []msg.RecordID
	if f := intArg(t, d, "floor", 0); f > 0 {
		floors = []msg.RecordID{{Client: uint64(client), Seq: uint64(f)}}
	}
	for _, id := range to {
		h.queue = append(h.queue, msg.Envelope{From: clientBase + msg.NodeID(client), To: id,
			Msg: msg.Append{View: h.coordRec.Number, Records: recs, Floors: floors}})
	}
	fmt.Fprintf(&h.out, "%d queued\n", len(h.queue))
}

// deliver delivers matching queued messages (all of them, repeatedly, if
// all is set), printing each.
func (h *harness) deliver(t *testing.T, d *datadriven.TestData, all bool) {
	var to, from msg.NodeID
	var kind string
	limit := -1
	if !all {
		to, from = msg.NodeID(intArg(t, d, "to", 0)), msg.NodeID(intArg(t, d, "from", 0))
		if d.HasArg("kind") {
			d.ScanArgs(t, "kind", &kind)
		}
		limit = intArg(t, d, "n", -1)
	}
	for rounds := 0; ; rounds++ {
		if rounds > 1000 {
			t.Fatal("deliver: no quiescence after 1000 rounds")
		}
		var batch, kept []msg.Envelope
		for _, e := range h.queue {
			if (to == 0 || e.To == to) && (from == 0 || e.From == from) && (kind == "" || e.Msg.Kind().String() == kind) &&
				(limit < 0 || len(batch) < limit) {
				batch = append(batch, e)
			} else {
				kept = append(kept, e)
			}
		}
		h.queue = kept
		if len(batch) == 0 {
			return
		}
		// Every node steps what it received, then runs one Ready, as the
		// live drivers do.
		var touched []msg.NodeID
		for _, e := range batch {
			if h.step(e) && !slices.Contains(touched, e.To) {
				touched = append(touched, e.To)
			}
		}
		slices.Sort(touched)
		for _, id := range touched {
			if r := h.replica(id); r != nil && r.core != nil {
				h.ready(r)
			} else if s := h.shard(id); s != nil && s.core != nil {
				rd := s.core.Ready()
				for _, w := range rd.Writes {
					if err := s.store.Apply(w); err != nil {
						t.Fatal(err)
					}
				}
				h.queue = append(h.queue, rd.Messages...)
				for _, v := range s.core.Violations() {
					fmt.Fprintf(&h.out, "VIOLATION %s\n", v)
				}
			}
		}
		if !all {
			return
		}
	}
}

// step delivers one message, printing it; it reports whether a node
// stepped it (and needs its Ready run).
func (h *harness) step(e msg.Envelope) bool {
	switch {
	case e.To == msg.Coordinator:
		fmt.Fprintf(&h.out, "%s\n", format(e))
		var resp msg.CoordResp
		switch m := e.Msg.(type) {
		case msg.CoordGet:
			resp = msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: h.coordRev, View: h.coordRec.Clone()}
		case msg.CoordCAS:
			ok := m.ExpectRev == h.coordRev
			if ok {
				h.coordRec, h.coordRev = m.View.Clone(), h.coordRev+1
			}
			resp = msg.CoordResp{ReqID: m.ReqID, OK: ok, Rev: h.coordRev, View: h.coordRec.Clone()}
		}
		h.queue = append(h.queue, msg.Envelope{From: msg.Coordinator, To: e.From, Msg: resp})
		return false
	case e.To >= clientBase:
		fmt.Fprintf(&h.out, "%s\n", format(e))
		return false
	}
	if r := h.replica(e.To); r != nil && r.core != nil {
		fmt.Fprintf(&h.out, "%s\n", format(e))
		r.core.Step(e)
		return true
	}
	if s := h.shard(e.To); s != nil && s.core != nil {
		fmt.Fprintf(&h.out, "%s\n", format(e))
		s.core.Step(e)
		return true
	}
	fmt.Fprintf(&h.out, "%s (dropped: node down)\n", format(e))
	return false
}

func (h *harness) ready(r *replicaNode) {
	rd := r.core.Ready()
	for _, op := range rd.Persist {
		if op.Kind == seq.PersistStartView {
			r.lastStartedView = max(r.lastStartedView, op.View.Number)
		}
		r.wal = append(r.wal, op)
		if op.Kind == seq.PersistCheckpoint {
			r.wal = append(r.wal[:0:0], op)
		}
	}
	h.queue = append(h.queue, rd.Messages...)
	// The harness copied the messages: every script runs with the
	// replica reusing its outbound array, as the memory-durability driver.
	r.core.ReuseReady(rd)
	for _, v := range r.core.Violations() {
		fmt.Fprintf(&h.out, "VIOLATION %s\n", v)
	}
}

func (h *harness) state() {
	for _, r := range h.replicas {
		if r.core == nil {
			fmt.Fprintf(&h.out, "replica %d: down\n", r.id)
			continue
		}
		c := r.core
		fmt.Fprintf(&h.out, "replica %d: view %d %s sealed=%v last-ordered-gp %d stable-gp %d unordered %d\n",
			r.id, c.View(), c.Role(), c.Sealed(), c.LastOrderedGP(), c.StableGP(), c.UnorderedLen())
	}
	for _, s := range h.shards {
		if s.core == nil {
			fmt.Fprintf(&h.out, "shard %d: down\n", s.id)
			continue
		}
		m := s.core.Meta()
		var pos []string
		s.store.Scan(1, 1<<62, func(e msg.Entry) bool {
			pos = append(pos, fmt.Sprintf("%d:%s", e.Pos, e.Record.ID))
			return true
		})
		fmt.Fprintf(&h.out, "shard %d: epoch %d stable-gp %d entries [%s]\n", s.id, m.Epoch, m.StableGP, strings.Join(pos, " "))
	}
	v := h.coordRec
	change := ""
	if v.Change != nil {
		change = fmt.Sprintf(" change to %d by %d, members %v", v.Change.Epoch, v.Change.Flusher, v.Change.NewMembers)
	}
	dedup := ""
	if len(v.Dedup) > 0 {
		dedup = fmt.Sprintf(" dedup %v", v.Dedup)
	}
	fmt.Fprintf(&h.out, "coordinator: rev %d view %d members %v leader %d start-gp %d%s%s\n", h.coordRev, v.Number, v.Members, v.Leader, v.StartGP, dedup, change)
}

func (h *harness) replica(id msg.NodeID) *replicaNode {
	for _, r := range h.replicas {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (h *harness) shard(id msg.NodeID) *shardNode {
	for _, s := range h.shards {
		if s.id == id {
			return s
		}
	}
	return nil
}

func name(id msg.NodeID) string {
	switch {
	case id == msg.Coordinator:
		return "coord"
	case id >= clientBase:
		return fmt.Sprintf("c%d", id-clientBase)
	}
	return strconv.Itoa(int(id))
}

func ids(ids []msg.RecordID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// format prints a message compactly: sender->receiver, kind, fields.
func format(e msg.Envelope) string {
	var body string
	switch m := e.Msg.(type) {
	case msg.Append:
		var r []msg.RecordID
		for _, rec := range m.Records {
			r = append(r, rec.ID)
		}
		body = fmt.Sprintf("view=%d %s", m.View, ids(r))
		if len(m.Floors) > 0 {
			body += fmt.Sprintf(" floors %s", ids(m.Floors))
		}
	case msg.AppendAck:
		body = fmt.Sprintf("view=%d %s", m.View, ids(m.IDs))
	case msg.AppendReject:
		body = fmt.Sprintf("view=%d reason=%d %s", m.View, m.Reason, ids(m.IDs))
	case msg.Store:
		var es []string
		for _, en := range m.Entries {
			es = append(es, fmt.Sprintf("%d:%s", en.Pos, en.Record.ID))
		}
		body = fmt.Sprintf("epoch=%d batch=%d [%s]", m.Epoch, m.Batch, strings.Join(es, " "))
		if m.Truncate {
			body += fmt.Sprintf(" truncate-above=%d", m.TruncateAbove)
		}
	case msg.StoreAck:
		body = fmt.Sprintf("epoch=%d batch=%d", m.Epoch, m.Batch)
	case msg.StoreReject:
		body = fmt.Sprintf("epoch=%d batch=%d", m.Epoch, m.Batch)
	case msg.GC:
		body = fmt.Sprintf("view=%d %d..%d %s", m.View, m.FromGP, m.ToGP, ids(m.IDs))
	case msg.GCAck:
		body = fmt.Sprintf("view=%d last-ordered-gp=%d", m.View, m.LastOrderedGP)
	case msg.StableGP:
		body = fmt.Sprintf("epoch=%d gp=%d", m.Epoch, m.GP)
	case msg.Heartbeat:
		body = fmt.Sprintf("view=%d last-ordered-gp=%d stable-gp=%d", m.View, m.LastOrderedGP, m.StableGP)
	case msg.HeartbeatAck:
		body = fmt.Sprintf("view=%d last-ordered-gp=%d", m.View, m.LastOrderedGP)
	case msg.CheckTail:
		body = fmt.Sprintf("req=%d", m.ReqID)
	case msg.TailResp:
		body = fmt.Sprintf("req=%d ok=%v view=%d tail=%d stable-gp=%d", m.ReqID, m.OK, m.View, m.Tail, m.StableGP)
	case msg.Seal:
		body = fmt.Sprintf("view=%d", m.View)
	case msg.SealAck:
		body = fmt.Sprintf("view=%d", m.View)
	case msg.StartView:
		body = fmt.Sprintf("view=%d members=%v leader=%d start-gp=%d", m.View.Number, m.View.Members, m.View.Leader, m.View.StartGP)
	case msg.Join:
		body = fmt.Sprintf("last-started-view=%d", m.LastStartedView)
	case msg.CoordGet:
		body = ""
	case msg.CoordCAS:
		body = fmt.Sprintf("expect-rev=%d %s", m.ExpectRev, record(m.View))
	case msg.CoordResp:
		body = fmt.Sprintf("ok=%v rev=%d %s", m.OK, m.Rev, record(m.View))
	default:
		body = fmt.Sprintf("%+v", m)
	}
	return strings.TrimSpace(fmt.Sprintf("%s->%s %s %s", name(e.From), name(e.To), e.Msg.Kind(), body))
}

func record(v msg.ViewRecord) string {
	s := fmt.Sprintf("{view %d members %v leader %d start-gp %d", v.Number, v.Members, v.Leader, v.StartGP)
	if v.Change != nil {
		s += fmt.Sprintf(" change to %d by %d members %v", v.Change.Epoch, v.Change.Flusher, v.Change.NewMembers)
	}
	return s + "}"
}

// forge queues a message that its claimed sender never sent.
func (h *harness) forge(t *testing.T, d *datadriven.TestData) {
	var fromS, kind string
	d.ScanArgs(t, "from", &fromS)
	d.ScanArgs(t, "kind", &kind)
	var from msg.NodeID
	if c, ok := strings.CutPrefix(fromS, "c"); ok {
		n, err := strconv.Atoi(c)
		if err != nil {
			t.Fatalf("forge: from: %v", err)
		}
		from = clientBase + msg.NodeID(n)
	} else {
		n, err := strconv.ParseUint(fromS, 10, 32)
		if err != nil {
			t.Fatalf("forge: from: %v", err)
		}
		from = msg.NodeID(n)
	}
	to := msg.NodeID(intArg(t, d, "to", 0))
	view := uint64(intArg(t, d, "view", 0))
	epoch := uint64(intArg(t, d, "epoch", 0))
	var m msg.Message
	switch kind {
	case "StartView":
		m = msg.StartView{View: msg.ViewRecord{Number: view, Leader: msg.NodeID(intArg(t, d, "leader", 0)), Members: idsArg(t, d, "members")}}
	case "Seal":
		m = msg.Seal{View: view}
	case "GC":
		m = msg.GC{View: view, FromGP: 1, ToGP: 1, IDs: []msg.RecordID{{Client: 9, Seq: 1}}}
	case "Join":
		m = msg.Join{}
	case "Heartbeat":
		m = msg.Heartbeat{View: view, StableGP: uint64(intArg(t, d, "stable", 0))}
	case "Store":
		m = msg.Store{Epoch: epoch, Batch: 1 << 40, Truncate: d.HasArg("truncate-above"), TruncateAbove: uint64(intArg(t, d, "truncate-above", 0))}
	case "StableGP":
		m = msg.StableGP{Epoch: epoch, GP: uint64(intArg(t, d, "gp", 0))}
	case "PeerGone":
		m = msg.PeerGone{} // the local mesh's report that X's process ended
	case "CoordResp":
		m = msg.CoordResp{ReqID: uint64(intArg(t, d, "req", 0)), OK: true, Rev: uint64(intArg(t, d, "rev", 0)),
			View: msg.ViewRecord{Number: view, Leader: msg.NodeID(intArg(t, d, "leader", 0)), Members: idsArg(t, d, "members")}}
	default:
		t.Fatalf("forge: unknown kind %q", kind)
	}
	h.queue = append(h.queue, msg.Envelope{From: from, To: to, Msg: m})
	fmt.Fprintf(&h.out, "%d queued\n", len(h.queue))
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func idsArg(t *testing.T, d *datadriven.TestData, key string) []msg.NodeID {
	if !d.HasArg(key) {
		return nil
	}
	var vs []string
	for _, a := range d.CmdArgs {
		if a.Key == key {
			vs = a.Vals
		}
	}
	var out []msg.NodeID
	for _, v := range vs {
		for _, part := range strings.Split(v, ",") {
			n, err := strconv.Atoi(part)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			out = append(out, msg.NodeID(n))
		}
	}
	return out
}
