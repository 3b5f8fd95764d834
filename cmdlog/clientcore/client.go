// Package clientcore is the cmdlog client as a pure state machine: it sends
// each append to every sequencing replica of the current view and completes
// it when all acknowledged; it retries with the same record id on timeout or
// view change (replicas deduplicate, so a retry never stores twice); it
// reads from shards and asks the leader for the tail. cmdlog.Client drives
// it over the network; the simulator drives it directly.
package clientcore

import (
	"slices"

	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/rtt"
)

// Config parameterises a Client.
type Config struct {
	// ID is the client's node id (its network address).
	ID msg.NodeID
	// ClientID is the deduplication identity of the records it appends.
	// It must be unique across the cluster's lifetime for each client
	// incarnation (a restarted producer that wants exactly-once re-appends
	// reuses its ClientID and request numbers).
	ClientID uint64
	Layout   msg.Layout
	// RetryTicks: unacknowledged requests are resent after this long.
	RetryTicks int
	// AppendRetryTicks is the least time before an append is resent to a
	// replica that has not acknowledged it (default RetryTicks; the
	// measured acknowledgement time raises it). Links are reliable
	// streams and view changes are announced, so a resend only covers a
	// message lost to a full queue or a reset link: a live client sets it
	// well above the acknowledgement times it sees under load, where every
	// spurious resend adds to the load.
	AppendRetryTicks int
	// MaxBatch caps records per Append message.
	MaxBatch int
	// MaxInflightBatches caps rounds of Append messages sent and not yet
	// complete (default 4). While the cap is reached, new appends wait
	// and leave together in the next round: under load, fewer and larger
	// messages instead of one round per append. Retries are not capped.
	// CPU per append is what bounds the log's rate on a small machine,
	// and it goes mostly per message (QUIC, the mesh, the codec, a
	// replica's round): 4 rather than 16 took the messages per append at
	// 64 appenders from 2.2 to 0.8 and their CPU per append down by a
	// fifth (docs/benchmarks.md, session 15). A single appender, or up to
	// 4 appenders that each wait for their append, never waits for the
	// cap.
	MaxInflightBatches int
	// MaxInflightBytes caps the record bytes of those rounds (default 2
	// MiB; a round always carries at least one record). Large records
	// otherwise fill the rounds with 512 records each, tens of MiB queued on
	// every replica's link, and each append waits behind all of them.
	MaxInflightBytes int
	// LeaseViews is the replicas' dedup lease in views (seq.Config.
	// LeaseViews, the same value): an append first sent in view V is sent
	// only in views below V+LeaseViews, where its dedup marks are sure to
	// be carried; in a later view it completes with Unknown set (stored at
	// most once, maybe not at all) and is never sent again. 0 means
	// dedup.DefaultLeaseViews.
	LeaseViews int
	// IgnoreLeaseBug resends appends past their lease (a known bug, for
	// the simulator's checker: such a resend can be stored twice). Never
	// set outside tests.
	IgnoreLeaseBug bool
}

// maxBatchBytes caps the record bytes of one Append message, well inside the
// codec's message size limit.
const maxBatchBytes = 4 << 20

// MaxRecordSize is the largest record a client appends (the codec's limit
// on one record).
const MaxRecordSize = 1 << 20

// Completion reports the outcome of a request.
type Completion struct {
	Kind CompletionKind
	// ID is the appended record's id (CompleteAppend).
	ID msg.RecordID
	// ReqID names the read, tail or trim request.
	ReqID uint64
	// Entries are the entries read (CompleteRead).
	Entries []msg.Entry
	// Err is the read outcome (CompleteRead).
	Err msg.ReadErr
	// Tail is the log tail (CompleteTail); TrimmedTo after a trim.
	Tail     uint64
	StableGP uint64
	// View is the view the request completed in.
	View uint64
	// Unknown (CompleteAppend): the append's lease ran out before every
	// replica acknowledged it; it is stored at most once, maybe not at
	// all, and the client stopped sending it.
	Unknown bool
}

// CompletionKind says which request completed.
type CompletionKind uint8

const (
	CompleteAppend CompletionKind = iota + 1
	CompleteRead
	CompleteTail
	CompleteTrim
)

// Ready is the work a Client asks of its driver: send Messages, deliver
// Completions.
type Ready struct {
	Messages    []msg.Envelope
	Completions []Completion
}

type pendingAppend struct {
	rec  msg.Record
	view uint64
	// acks are the replicas of view that acknowledged it; it starts on
	// ackBuf, so a view of up to len(ackBuf) replicas costs no allocation
	// per append (growing it from nil cost two).
	acks     []msg.NodeID
	ackBuf   [5]msg.NodeID
	sentAt   int64
	unsent   bool
	attempts int
	// order is the append's rank in request order.
	order uint64
	// done: completed, awaiting removal from Client.appends.
	done bool
	// round is the flush that last sent it (0: none in this view).
	round uint64
	// firstView is the view it was first sent in (0: not yet sent).
	firstView uint64
	// floor is its client's floor the producer declared with it
	// (AppendWithFloor; 0: none); own says it is one of Append's.
	floor uint64
	own   bool
}

// round is one flush of Append messages still in flight.
type round struct {
	appends, bytes int
}

// recordCost is the bytes a record counts for in the message caps.
func recordCost(data []byte) int { return len(data) + 32 }

type pendingRead struct {
	req    msg.Read
	shard  msg.NodeID
	sentAt int64
}

type pendingTail struct {
	reqID  uint64
	sentAt int64
	sent   bool
}

type pendingTrim struct {
	req    msg.Trim
	acks   []msg.NodeID
	sentAt int64
}

// Client is the cmdlog client core.
type Client struct {
	cfg Config
	now int64

	view    msg.ViewRecord
	viewRev uint64

	nextSeq uint64
	// appends in request order. Completed ones are marked done and
	// removed in bulk once they are half of the slice (completing an
	// append costs O(1) amortised, not a scan of every pending one).
	appends []*pendingAppend
	// doneCount is the number of done entries in appends.
	doneCount int
	// firstUnsent: every unsent append is at an index >= firstUnsent.
	firstUnsent int
	// appendOrder numbers appends in request order.
	appendOrder uint64
	// sweepOnAck asks the next acknowledgement to look for completed
	// appends among all pending ones (after a view update that kept the
	// number but may have changed the members).
	sweepOnAck bool
	// rounds counts, per round of Append messages in flight in this
	// view, its appends and bytes not yet complete; nextRound numbers
	// rounds; inflightBytes sums their bytes.
	rounds        map[uint64]round
	nextRound     uint64
	inflightBytes int
	// rtt measures how long replicas take to acknowledge (first attempts
	// only): retries wait for it rather than a fixed timeout.
	rtt rtt.Estimator
	// completing is scratch space for onAck.
	completing []*pendingAppend
	// byID indexes the pending appends by record id (own and foreign
	// ids: an id appended again while pending joins the first).
	byID     map[msg.RecordID]*pendingAppend
	nextReq  uint64
	reads    map[uint64]*pendingRead
	readIDs  []uint64
	tails    []*pendingTail
	trims    []*pendingTrim
	coordReq uint64
	coordAt  int64
	wantView bool

	// ownNext is the lowest of Append's own ids not yet complete or
	// abandoned (the client's floor); ownDone holds those above it that
	// are. noFloor: a caller appended an id of our ClientID itself, so
	// our ids are not all Append's and we declare no floor.
	ownNext uint64
	ownDone map[uint64]bool
	noFloor bool
	// unknown counts appends completed with Unknown.
	unknown uint64

	ready Ready
}

// New returns a client. It learns the view from the coordinator before
// sending appends.
func New(cfg Config) *Client {
	if cfg.RetryTicks <= 0 {
		cfg.RetryTicks = 8
	}
	if cfg.AppendRetryTicks <= 0 {
		cfg.AppendRetryTicks = cfg.RetryTicks
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 512
	}
	cfg.MaxBatch = min(cfg.MaxBatch, 8192)
	if cfg.MaxInflightBatches <= 0 {
		cfg.MaxInflightBatches = 4
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = 2 << 20
	}
	if cfg.LeaseViews <= 0 {
		cfg.LeaseViews = dedup.DefaultLeaseViews
	}
	c := &Client{
		ownNext:  1,
		ownDone:  make(map[uint64]bool),
		cfg:      cfg,
		byID:     make(map[msg.RecordID]*pendingAppend),
		rounds:   make(map[uint64]round),
		reads:    make(map[uint64]*pendingRead),
		wantView: true,
	}
	return c
}

// View returns the view the client currently sends to.
func (c *Client) View() msg.ViewRecord { return c.view }

// Pending returns the number of appends not yet complete.
func (c *Client) Pending() int { return len(c.appends) - c.doneCount }

// Ready returns the accumulated work and resets it. Unsent appends are cut
// into batched Append messages here, so appends issued together share
// messages.
func (c *Client) Ready() Ready {
	c.flushAppends()
	if c.wantView && c.coordReq == 0 {
		c.requestView()
	}
	rd := c.ready
	c.ready = Ready{}
	return rd
}

// maxReused caps the slices ReuseReady keeps: a round that sent or
// completed more does not pin its arrays.
const maxReused = 256

// ReuseReady tells the client that its driver is done with rd, the Ready
// it returned last, before anything else was stepped: every message was
// handed on and every completion delivered (copied out), and nothing
// refers to rd's slices any more. The next Ready then collects its
// messages and completions in the same backing arrays (cleared) instead
// of growing new ones, which cost two allocations per round, at one
// appender two per append. A completion's Entries are not reused. Calling
// it is optional: it changes no behaviour.
func (c *Client) ReuseReady(rd Ready) {
	if c.ready.Messages == nil && cap(rd.Messages) > 0 && cap(rd.Messages) <= maxReused {
		clear(rd.Messages)
		c.ready.Messages = rd.Messages[:0]
	}
	if c.ready.Completions == nil && cap(rd.Completions) > 0 && cap(rd.Completions) <= maxReused {
		clear(rd.Completions)
		c.ready.Completions = rd.Completions[:0]
	}
}

func (c *Client) send(to msg.NodeID, m msg.Message) {
	c.ready.Messages = append(c.ready.Messages, msg.Envelope{From: c.cfg.ID, To: to, Msg: m})
}

func (c *Client) complete(cp Completion) {
	c.ready.Completions = append(c.ready.Completions, cp)
}

// Append queues data for appending and returns its record id. Its
// Append messages carry the client's floor (msg.Append.Floors): every id
// of it below the lowest still pending is complete or abandoned.
func (c *Client) Append(data []byte) msg.RecordID {
	c.nextSeq++
	id := msg.RecordID{Client: c.cfg.ClientID, Seq: c.nextSeq}
	if p := c.add(id, data, 0); p != nil {
		p.own = true
	}
	return id
}

// AppendWithID queues a record with a caller-chosen id (deterministic
// producers such as the world ticker). Appending an id twice is harmless:
// the replicas store it once.
func (c *Client) AppendWithID(id msg.RecordID, data []byte) msg.RecordID {
	return c.AppendWithFloor(id, 0, data)
}

// AppendWithFloor is AppendWithID with the producer's floor of id's
// client: every id of id.Client below floor is complete or abandoned
// (its producer will never append it again), so the replicas may move
// the client's mark up to floor-1 and close the gaps that refused or
// abandoned ids leave (0: no floor). Only the one producer of a client's
// ids may declare its floor, and never above an id it may still append.
func (c *Client) AppendWithFloor(id msg.RecordID, floor uint64, data []byte) msg.RecordID {
	if id.Client == c.cfg.ClientID {
		c.noFloor = true
	}
	if p := c.byID[id]; p != nil {
		p.floor = max(p.floor, min(floor, id.Seq))
		return id
	}
	c.add(id, data, min(floor, id.Seq))
	return id
}

func (c *Client) add(id msg.RecordID, data []byte, floor uint64) *pendingAppend {
	if _, dup := c.byID[id]; dup {
		return nil
	}
	c.appendOrder++
	p := &pendingAppend{rec: msg.Record{ID: id, Data: data}, unsent: true, order: c.appendOrder, floor: floor}
	p.acks = p.ackBuf[:0]
	c.appends = append(c.appends, p)
	c.byID[id] = p
	return p
}

// Unknown returns how many appends completed with their outcome unknown
// (their lease ran out).
func (c *Client) Unknown() uint64 { return c.unknown }

// floors returns the floors to send with batch: the client's own, and
// the ones the producer declared for other clients, at most one per
// client in first-seen order.
func (c *Client) floors(batch []*pendingAppend) []msg.RecordID {
	var out []msg.RecordID
	var at map[uint64]int // index in out, once out is long (a server's many sessions)
	for _, p := range batch {
		f := p.floor
		if p.own {
			if c.noFloor {
				continue
			}
			f = c.ownNext
		}
		if f <= 1 {
			continue
		}
		client := p.rec.ID.Client
		i, ok := -1, false
		if at != nil {
			i, ok = at[client]
		} else if i = slices.IndexFunc(out, func(x msg.RecordID) bool { return x.Client == client }); i >= 0 {
			ok = true
		}
		if ok {
			out[i].Seq = max(out[i].Seq, f)
			continue
		}
		out = append(out, msg.RecordID{Client: client, Seq: f})
		if at != nil {
			at[client] = len(out) - 1
		} else if len(out) > 8 {
			at = make(map[uint64]int, 2*len(out))
			for j, x := range out {
				at[x.Client] = j
			}
		}
	}
	return out
}

// settleOwn notes that own id seq is complete or abandoned.
func (c *Client) settleOwn(seq uint64) {
	if seq < c.ownNext {
		return
	}
	c.ownDone[seq] = true
	for c.ownDone[c.ownNext] {
		delete(c.ownDone, c.ownNext)
		c.ownNext++
	}
}

// Read asks for up to max entries starting at from (within one stripe run);
// it completes with the entries or an error. Reads above stable-gp wait.
func (c *Client) Read(from uint64, max uint32) uint64 {
	c.nextReq++
	r := &pendingRead{req: msg.Read{ReqID: c.nextReq, From: from, Max: max}, shard: c.cfg.Layout.ShardOf(from), sentAt: c.now}
	c.reads[r.req.ReqID] = r
	c.readIDs = append(c.readIDs, r.req.ReqID)
	c.send(r.shard, r.req)
	return r.req.ReqID
}

// CheckTail asks the leader for the log's tail.
func (c *Client) CheckTail() uint64 {
	c.nextReq++
	t := &pendingTail{reqID: c.nextReq}
	c.tails = append(c.tails, t)
	c.sendTail(t)
	return t.reqID
}

// Trim asks every shard to drop positions up to and including upTo (at
// most up to stable-gp).
func (c *Client) Trim(upTo uint64) uint64 {
	c.nextReq++
	t := &pendingTrim{req: msg.Trim{ReqID: c.nextReq, UpTo: upTo}, sentAt: c.now}
	c.trims = append(c.trims, t)
	for _, s := range c.cfg.Layout.Shards {
		c.send(s, t.req)
	}
	return t.req.ReqID
}

func (c *Client) sendTail(t *pendingTail) {
	t.sentAt = c.now
	if c.viewRev == 0 || !c.view.Active() {
		t.sent = false
		c.wantView = true
		return
	}
	t.sent = true
	c.send(c.view.Leader, msg.CheckTail{ReqID: t.reqID})
}

func (c *Client) requestView() {
	c.nextReq++
	c.coordReq = c.nextReq
	c.coordAt = c.now
	c.send(msg.Coordinator, msg.CoordGet{ReqID: c.coordReq})
}

func (c *Client) flushAppends() {
	if c.viewRev == 0 || !c.view.Active() || len(c.rounds) >= c.cfg.MaxInflightBatches ||
		(len(c.rounds) > 0 && c.inflightBytes >= c.cfg.MaxInflightBytes) {
		return
	}
	c.nextRound++
	rid, n, roundBytes := c.nextRound, 0, 0
	var batch []*pendingAppend
	bytes := 0
	stop := len(c.appends)
	for i, p := range c.appends[c.firstUnsent:] {
		if p.done || !p.unsent {
			continue
		}
		if n > 0 && c.inflightBytes+roundBytes+recordCost(p.rec.Data) > c.cfg.MaxInflightBytes {
			stop = c.firstUnsent + i // the rest waits for a round to complete
			break
		}
		roundBytes += recordCost(p.rec.Data)
		p.unsent = false
		p.round = rid
		n++
		p.view = c.view.Number
		p.acks = p.acks[:0]
		p.sentAt = c.now
		p.attempts++
		if p.firstView == 0 {
			p.firstView = c.view.Number
		}
		if len(batch) > 0 && bytes+len(p.rec.Data) > maxBatchBytes {
			c.sendBatch(batch, c.view.Members)
			batch, bytes = nil, 0
		}
		batch = append(batch, p)
		bytes += len(p.rec.Data) + 32
		if len(batch) == c.cfg.MaxBatch {
			c.sendBatch(batch, c.view.Members)
			batch, bytes = nil, 0
		}
	}
	if len(batch) > 0 {
		c.sendBatch(batch, c.view.Members)
	}
	if n > 0 {
		c.rounds[rid] = round{n, roundBytes}
		c.inflightBytes += roundBytes
	}
	c.firstUnsent = stop
}

func (c *Client) sendBatch(batch []*pendingAppend, to []msg.NodeID) {
	recs := make([]msg.Record, len(batch))
	for i, p := range batch {
		recs[i] = p.rec
	}
	floors := c.floors(batch)
	// One boxed message shared by every replica's envelope (messages are
	// values nobody changes), and room for them at once.
	var am msg.Message = msg.Append{View: c.view.Number, Records: recs, Floors: floors}
	c.ready.Messages = slices.Grow(c.ready.Messages, len(to))
	for _, m := range to {
		c.send(m, am)
	}
}

// Tick advances logical time and resends what timed out.
func (c *Client) Tick() {
	c.now++
	retry := int64(c.cfg.RetryTicks)
	rto := c.rtt.Timeout(int64(c.cfg.AppendRetryTicks))
	if c.coordReq != 0 && c.now-c.coordAt > retry {
		c.requestView()
	}
	// Appends: resend to replicas that have not acknowledged; after
	// repeated failures, refresh the view.
	per := make(map[msg.NodeID][]*pendingAppend)
	var order []msg.NodeID
	for _, p := range c.appends {
		if p.done || p.unsent || c.now-p.sentAt <= rto<<min(p.attempts-1, 4) {
			continue // back off: replicas may just be slow, links are reliable
		}
		p.sentAt = c.now
		p.attempts++
		if p.attempts%3 == 0 {
			c.wantView = true
		}
		for _, m := range c.view.Members {
			if !slices.Contains(p.acks, m) {
				if _, ok := per[m]; !ok {
					order = append(order, m)
				}
				per[m] = append(per[m], p)
			}
		}
	}
	for _, m := range order {
		recs := per[m]
		for len(recs) > 0 {
			n, bytes := 0, 0
			for n < len(recs) && n < c.cfg.MaxBatch && (n == 0 || bytes+len(recs[n].rec.Data) <= maxBatchBytes) {
				bytes += len(recs[n].rec.Data) + 32
				n++
			}
			c.sendBatch(recs[:n], []msg.NodeID{m})
			recs = recs[n:]
		}
	}
	for _, id := range c.readIDs {
		r := c.reads[id]
		if r != nil && c.now-r.sentAt > 4*retry {
			r.sentAt = c.now
			c.send(r.shard, r.req)
		}
	}
	for _, t := range c.tails {
		if c.now-t.sentAt > 2*retry {
			c.sendTail(t)
		}
	}
	for _, t := range c.trims {
		if c.now-t.sentAt > 2*retry {
			t.sentAt = c.now
			for _, s := range c.cfg.Layout.Shards {
				if !slices.Contains(t.acks, s) {
					c.send(s, t.req)
				}
			}
		}
	}
}

// Step processes one incoming message.
func (c *Client) Step(env msg.Envelope) {
	switch m := env.Msg.(type) {
	case msg.AppendAck:
		c.onAck(env.From, m)
	case msg.AppendReject:
		// A refused append, or a replica telling us its view was sealed
		// or a new one started: learn the view now. A busy replica is
		// retried at the retry timeout (its view is fine).
		if m.Reason != msg.RejectBusy {
			c.wantView = true
		}
	case msg.ReadResp:
		c.onRead(m)
	case msg.TailResp:
		c.onTail(m)
	case msg.TrimAck:
		c.onTrim(env.From, m)
	case msg.CoordResp:
		c.onView(m)
	case msg.LinkUp:
		c.onLinkUp(env.From)
	}
}

func (c *Client) onAck(from msg.NodeID, m msg.AppendAck) {
	if m.View != c.view.Number || !c.view.HasMember(from) {
		return
	}
	if c.sweepOnAck {
		c.sweepOnAck = false
		c.sweepComplete()
	}
	// Only appends this message acknowledges can have become complete.
	done := c.completing[:0]
	for _, id := range m.IDs {
		if p := c.byID[id]; p != nil && !p.done {
			c.ackOne(p, from)
			if c.isComplete(p) {
				p.done = true
				done = append(done, p)
			}
		}
	}
	// Complete in request order, as a scan of appends would.
	if !slices.IsSortedFunc(done, cmpOrder) {
		slices.SortFunc(done, cmpOrder)
	}
	for _, p := range done {
		c.finish(p)
	}
	clear(done)
	c.completing = done[:0]
	c.compact()
}

func cmpOrder(a, b *pendingAppend) int {
	switch {
	case a.order < b.order:
		return -1
	case a.order > b.order:
		return 1
	}
	return 0
}

func (c *Client) isComplete(p *pendingAppend) bool {
	return p.view == c.view.Number && !p.unsent && len(p.acks) == len(c.view.Members)
}

// finish completes p (already marked done).
func (c *Client) finish(p *pendingAppend) { c.settle(p, false) }

// settle completes p (already marked done): stored, or its outcome
// unknown.
func (c *Client) settle(p *pendingAppend, unknown bool) {
	delete(c.byID, p.rec.ID)
	c.doneCount++
	if p.own {
		c.settleOwn(p.rec.ID.Seq)
	}
	if p.attempts == 1 && !unknown {
		c.rtt.Observe(c.now - p.sentAt)
	}
	if rd, ok := c.rounds[p.round]; ok {
		cost := recordCost(p.rec.Data)
		c.inflightBytes -= cost
		if rd.appends <= 1 {
			c.inflightBytes -= rd.bytes - cost // what is left of the round
			delete(c.rounds, p.round)
		} else {
			c.rounds[p.round] = round{rd.appends - 1, rd.bytes - cost}
		}
	}
	if unknown {
		c.unknown++
	}
	c.complete(Completion{Kind: CompleteAppend, ID: p.rec.ID, View: c.view.Number, Unknown: unknown})
}

// sweepComplete completes every pending append that is complete.
func (c *Client) sweepComplete() {
	for _, p := range c.appends {
		if !p.done && c.isComplete(p) {
			p.done = true
			c.finish(p)
		}
	}
}

// compact drops done appends once they are at least half of the slice.
func (c *Client) compact() {
	if c.doneCount == 0 || c.doneCount*2 < len(c.appends) {
		return
	}
	kept, firstUnsent := c.appends[:0], -1
	for i, p := range c.appends {
		if p.done {
			continue
		}
		if firstUnsent < 0 && i >= c.firstUnsent {
			firstUnsent = len(kept)
		}
		kept = append(kept, p)
	}
	if firstUnsent < 0 {
		firstUnsent = len(kept)
	}
	clear(c.appends[len(kept):])
	c.appends, c.firstUnsent, c.doneCount = kept, firstUnsent, 0
}

func (c *Client) ackOne(p *pendingAppend, from msg.NodeID) {
	if p.unsent || p.view != c.view.Number || slices.Contains(p.acks, from) {
		return
	}
	p.acks = append(p.acks, from)
}

func (c *Client) onRead(m msg.ReadResp) {
	r := c.reads[m.ReqID]
	if r == nil {
		return
	}
	if m.Err == msg.ReadOK && len(m.Entries) == 0 {
		// Nothing stable yet (the shard shed a parked read): retry later.
		r.sentAt = c.now
		return
	}
	delete(c.reads, m.ReqID)
	c.readIDs = slices.DeleteFunc(c.readIDs, func(id uint64) bool { return id == m.ReqID })
	c.complete(Completion{Kind: CompleteRead, ReqID: m.ReqID, Entries: m.Entries, Err: m.Err, StableGP: m.StableGP})
}

func (c *Client) onTail(m msg.TailResp) {
	i := slices.IndexFunc(c.tails, func(t *pendingTail) bool { return t.reqID == m.ReqID })
	if i < 0 {
		return
	}
	if !m.OK {
		c.wantView = true
		return
	}
	c.tails = slices.Delete(c.tails, i, i+1)
	c.complete(Completion{Kind: CompleteTail, ReqID: m.ReqID, Tail: m.Tail, StableGP: m.StableGP, View: m.View})
}

func (c *Client) onTrim(from msg.NodeID, m msg.TrimAck) {
	i := slices.IndexFunc(c.trims, func(t *pendingTrim) bool { return t.req.ReqID == m.ReqID })
	if i < 0 {
		return
	}
	t := c.trims[i]
	if !slices.Contains(t.acks, from) {
		t.acks = append(t.acks, from)
	}
	if len(t.acks) == len(c.cfg.Layout.Shards) {
		c.trims = slices.Delete(c.trims, i, i+1)
		c.complete(Completion{Kind: CompleteTrim, ReqID: m.ReqID, Tail: m.TrimmedTo})
	}
}

func (c *Client) onView(m msg.CoordResp) {
	if m.ReqID != c.coordReq {
		return
	}
	c.coordReq = 0
	if m.Rev == 0 || !m.View.Active() {
		// No view yet, or a change under way: ask again at the next tick
		// (a view change takes a few round trips; waiting RetryTicks
		// would add that much to every client's recovery).
		c.wantView = true
		c.coordAt = c.now - int64(c.cfg.RetryTicks)
		c.nextReq++
		// Delay the next poll by pretending one is outstanding.
		c.coordReq = c.nextReq
		return
	}
	c.wantView = false
	if m.Rev <= c.viewRev {
		return
	}
	changed := m.View.Number != c.view.Number
	if !changed && len(m.View.Members) != len(c.view.Members) {
		c.sweepOnAck = true
	}
	c.view, c.viewRev = m.View.Clone(), m.Rev
	if changed {
		// Retry every incomplete append in the new view with the same id,
		// if its lease allows: one first sent L views ago or more may
		// have been stored in a view whose marks expired since, so it is
		// given up (stored at most once, maybe not at all).
		clear(c.rounds)
		c.inflightBytes = 0
		lease := uint64(c.cfg.LeaseViews)
		for _, p := range c.appends {
			if p.done {
				continue
			}
			p.round = 0
			if p.firstView != 0 && (c.view.Number < p.firstView || c.view.Number-p.firstView >= lease) && !c.cfg.IgnoreLeaseBug {
				p.done = true
				c.settle(p, true)
				continue
			}
			p.unsent = true
			p.acks = p.acks[:0]
		}
		c.firstUnsent = 0
		c.compact()
	}
	for _, t := range c.tails {
		if !t.sent {
			c.sendTail(t)
		}
	}
}

// onLinkUp makes the client resend at its next tick what it waits for from
// a node with a new link: appends it has not acknowledged, reads from it,
// tail queries to it.
func (c *Client) onLinkUp(peer msg.NodeID) {
	const long = 1 << 30
	if c.view.HasMember(peer) {
		for _, p := range c.appends {
			if !p.done && !p.unsent && !slices.Contains(p.acks, peer) {
				p.sentAt = c.now - long
			}
		}
	}
	for _, r := range c.reads {
		if r.shard == peer {
			r.sentAt = c.now - long
		}
	}
	if peer == c.view.Leader {
		for _, t := range c.tails {
			t.sentAt = c.now - long
		}
	}
}
