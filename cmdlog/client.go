// Package cmdlog is Broadside's shared command log: a lazily ordered,
// replicated log (LazyLog, Erwin black-box design). Appends are durable in
// one round trip to every sequencing replica; positions are bound later by
// the view's leader. The protocol roles live in seq, shard and clientcore as
// pure state machines; node runs them live; Client is the API producers and
// consumers use.
package cmdlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anoptic/broadside/cmdlog/clientcore"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
)

// ErrTrimmed is returned when reading a position that was trimmed away.
var ErrTrimmed = errors.New("cmdlog: position trimmed")

// ErrClosed is returned by calls on a closed client.
var ErrClosed = errors.New("cmdlog: client closed")

// ErrOutcomeUnknown: an append's dedup lease ran out before every
// sequencing replica acknowledged it (its first send was
// clientcore.Config.LeaseViews views ago, and a retry could no longer be
// recognised): it is stored at most once, maybe not at all, and the
// client does not send it again. The caller may read the log to find out,
// or append the data again with a new id.
var ErrOutcomeUnknown = errors.New("cmdlog: append outcome unknown (lease ran out: stored at most once, maybe not at all)")

// ClientConfig configures a Client.
type ClientConfig struct {
	// ID is the client's network address in the cluster (distinct from
	// every other node's). Zero picks a random one.
	ID msg.NodeID
	// ClientID is the deduplication identity of this client's records.
	// Zero picks a random one. A producer that re-appends after a crash
	// with deterministic ids reuses its ClientID.
	ClientID uint64
	Layout   msg.Layout
	// Coordinator tells the client the current view.
	Coordinator coord.Coordinator
	Transport   node.Transport
	// Inbox receives the client's messages; the transport delivers to it.
	Inbox  node.Inbox
	Timing node.Timing
	// RetryTicks: requests unanswered this long are resent (default 8).
	RetryTicks int
	// AppendRetryTicks: the least time before an unacknowledged append is
	// resent (default 40 ticks, 200 ms at the default tick; see
	// clientcore.Config.AppendRetryTicks).
	AppendRetryTicks int
	// OnAppendLatency, if set, is called with each append's latency.
	OnAppendLatency func(time.Duration)
}

// Client appends to and reads from the log. It is safe for concurrent use;
// concurrent appends are batched into shared messages.
type Client struct {
	cfg    ClientConfig
	reqs   chan request
	done   chan struct{}
	closed sync.Once
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// asyncMu and stopped let Close settle every asynchronous append
	// that entered reqs but was never taken by the loop.
	asyncMu sync.RWMutex
	stopped bool

	// coreMu owns the core and what submit and ready touch: the loop
	// holds it for each round, and a synchronous call that finds it free
	// and nothing queued steps its request and carries out the Ready
	// itself (stepInline), without a hand-off to the loop. submit and
	// ready are set by the loop before it starts, nil once it ended.
	coreMu sync.Mutex
	submit func(request)
	ready  func() error
}

type request struct {
	kind   clientcore.CompletionKind
	data   []byte
	id     msg.RecordID
	withID bool
	floor  uint64 // with withID: the producer's floor of id's client
	from   uint64
	max    uint32
	upTo   uint64
	start  time.Time
	reply  chan result
	// onDone, if set, is called instead of replying (AppendWithIDAsync).
	onDone func(error)
}

// finish delivers a request's result.
func (r request) finish(res result) {
	if r.onDone != nil {
		r.onDone(res.err)
		return
	}
	r.reply <- res
}

type result struct {
	entries []msg.Entry
	tail    uint64
	err     error
}

// NewClient starts a client. Close stops it.
func NewClient(cfg ClientConfig) *Client {
	if cfg.ID == 0 {
		cfg.ID = randomClientID()
	}
	if cfg.ClientID == 0 {
		cfg.ClientID = rand.Uint64() | 1<<62
	}
	if cfg.AppendRetryTicks == 0 {
		cfg.AppendRetryTicks = 40
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, reqs: make(chan request, 4096), done: make(chan struct{}), cancel: cancel}
	c.wg.Add(1)
	go c.loop(ctx)
	return c
}

// randomClientID picks a network id in the clients' range.
func randomClientID() msg.NodeID { return msg.NodeID(1<<24 + rand.Uint32N(1<<30)) }

// ID returns the client's network id.
func (c *Client) ID() msg.NodeID { return c.cfg.ID }

// ClientID returns the client's deduplication identity.
func (c *Client) ClientID() uint64 { return c.cfg.ClientID }

// Close stops the client. Appends still in flight may or may not complete.
func (c *Client) Close() {
	c.closed.Do(func() {
		c.cancel()
		close(c.done)
		c.wg.Wait()
		c.asyncMu.Lock()
		defer c.asyncMu.Unlock()
		c.stopped = true
		for {
			select {
			case r := <-c.reqs:
				if r.onDone != nil {
					r.onDone(ErrClosed)
				}
			default:
				return
			}
		}
	})
}

// ErrTooLarge is returned when appending a record above MaxRecordSize.
var ErrTooLarge = fmt.Errorf("cmdlog: record larger than %d bytes", clientcore.MaxRecordSize)

func (c *Client) call(ctx context.Context, r request) (result, error) {
	if r.kind == clientcore.CompleteAppend && len(r.data) > clientcore.MaxRecordSize {
		return result{}, ErrTooLarge
	}
	r.reply = replyChans.Get().(chan result)
	r.start = time.Now()
	if !c.stepInline(r) {
		select {
		case c.reqs <- r:
		case <-ctx.Done():
			replyChans.Put(r.reply) // never handed to the client
			return result{}, ctx.Err()
		case <-c.done:
			replyChans.Put(r.reply)
			return result{}, ErrClosed
		}
	}
	select {
	case res := <-r.reply:
		// The client sends one result per request: the channel is empty
		// and nobody else holds it.
		replyChans.Put(r.reply)
		return res, res.err
	case <-ctx.Done():
		return result{}, ctx.Err() // the reply may still come: not reused
	case <-c.done:
		return result{}, ErrClosed
	}
}

// replyChans recycles the reply channels of synchronous calls (one
// allocation per call otherwise). A channel goes back only once its one
// result was received, or when the request never reached the client.
var replyChans = sync.Pool{New: func() any { return make(chan result, 1) }}

// Append appends a copy of data and returns when it is durable (acknowledged by every
// sequencing replica of the view). If ctx ends first, the append may still
// complete later: the client keeps retrying it with the same id, and the
// log stores it at most once. It fails with ErrOutcomeUnknown if its
// dedup lease runs out first (clientcore.Config.LeaseViews view changes
// while it was pending).
func (c *Client) Append(ctx context.Context, data []byte) error {
	_, err := c.call(ctx, request{kind: clientcore.CompleteAppend, data: bytes.Clone(data)})
	return err
}

// AppendWithID appends a record with a caller-chosen id. Appending the same
// id again (after a crash, or from a second producer) stores it once.
//
// Ids of one client must be dense from 1 (1, 2, 3, ...; any order): the
// replicas remember a high-water mark and the ids seen above it, and admit
// only ids less than seq.Config.DedupWindow (16) above the mark; an id
// further up is refused busy and retried until the ones below it arrive.
// A producer whose ids have holes (ids it refused, or appends that failed
// with ErrOutcomeUnknown) closes them with AppendWithFloorAsync.
func (c *Client) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	_, err := c.call(ctx, request{kind: clientcore.CompleteAppend, data: bytes.Clone(data), id: id, withID: true})
	return err
}

// AppendWithIDAsync is AppendWithID without a goroutine waiting: it hands
// a copy of data to the client and returns; done is called once with the
// outcome (nil when the record is stored as the log promises, ErrTooLarge,
// or ErrClosed when the client closes first). done runs while the client's
// core is held (on its loop, or on the goroutine of a synchronous call or
// a link reader stepping the core), so it must be quick and must not call
// the client. It blocks
// only while the client's request queue is full (backpressure), and
// returns ErrClosed without calling done when the client is closed or ctx
// ends first.
//
// A server with thousands of commands in flight uses it instead of one
// goroutine per append: every pending append still joins the client's
// shared rounds, bounded in bytes (see clientcore.Config).
func (c *Client) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	return c.AppendWithFloorAsync(ctx, id, 0, data, done)
}

// AppendWithFloorAsync is AppendWithIDAsync with the producer's floor of
// id's client (clientcore.Client.AppendWithFloor): every id of id.Client
// below floor is complete or abandoned, and will never be appended
// again, so the replicas move the client's mark up to floor-1 and close
// the gaps ids its producer refused or abandoned leave (0: no floor).
// Only the one producer of a client's ids may declare its floor.
func (c *Client) AppendWithFloorAsync(ctx context.Context, id msg.RecordID, floor uint64, data []byte, done func(error)) error {
	if len(data) > clientcore.MaxRecordSize {
		done(ErrTooLarge)
		return nil
	}
	r := request{kind: clientcore.CompleteAppend, data: bytes.Clone(data), id: id, withID: true, floor: floor, start: time.Now(), onDone: done}
	c.asyncMu.RLock()
	defer c.asyncMu.RUnlock()
	if c.stopped {
		return ErrClosed
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	select {
	case c.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

// Read returns up to max stable entries starting at from (fewer at a stripe
// boundary). It waits while from is above stable-gp.
func (c *Client) Read(ctx context.Context, from uint64, max int) ([]msg.Entry, error) {
	if from == 0 {
		return nil, fmt.Errorf("cmdlog: read: positions start at 1")
	}
	res, err := c.call(ctx, request{kind: clientcore.CompleteRead, from: from, max: uint32(max)})
	return res.entries, err
}

// CheckTail returns the log's tail: every append that completed before the
// call is at a position <= the tail, and every position <= it is stable.
func (c *Client) CheckTail(ctx context.Context) (uint64, error) {
	res, err := c.call(ctx, request{kind: clientcore.CompleteTail})
	return res.tail, err
}

// Trim discards positions up to and including upTo (at most up to
// stable-gp) on every shard, and returns the trimmed prefix.
func (c *Client) Trim(ctx context.Context, upTo uint64) (uint64, error) {
	res, err := c.call(ctx, request{kind: clientcore.CompleteTrim, upTo: upTo})
	return res.tail, err
}

// stepInline steps r into the core and carries out the Ready on the
// caller's goroutine when the core is free and no request is queued for
// the loop (which keeps the requests of one caller in order); it reports
// false, leaving r to the loop, otherwise. The messages go out inline too
// on an idle link (mesh), so an append at rest costs no hand-off before
// the network. Only synchronous calls use it: a burst of asynchronous
// appends is better stepped as one round by the loop, and the queue keeps
// their order (and floors).
func (c *Client) stepInline(r request) bool {
	if len(c.reqs) > 0 || !c.coreMu.TryLock() {
		return false
	}
	defer c.coreMu.Unlock()
	if c.submit == nil || len(c.reqs) > 0 {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
	}
	c.submit(r)
	_ = c.ready()
	return true
}

func (c *Client) loop(ctx context.Context) {
	defer c.wg.Done()
	core := clientcore.New(clientcore.Config{ID: c.cfg.ID, ClientID: c.cfg.ClientID, Layout: c.cfg.Layout,
		RetryTicks: c.cfg.RetryTicks, AppendRetryTicks: c.cfg.AppendRetryTicks})
	proxy := coordProxy{c: c.cfg.Coordinator}
	// appends holds each pending append's request; the rare further
	// requests with the same id (AppendWithID called again while the
	// first is pending) wait in moreAppends, so the common case costs no
	// slice per append.
	appends := make(map[msg.RecordID]request)
	moreAppends := make(map[msg.RecordID][]request)
	reads := make(map[uint64]request)
	tick := c.cfg.Timing.Tick
	if tick <= 0 {
		tick = 5 * time.Millisecond
	}
	submit := func(r request) {
		switch r.kind {
		case clientcore.CompleteAppend:
			var id msg.RecordID
			if r.withID {
				id = core.AppendWithFloor(r.id, r.floor, r.data)
			} else {
				id = core.Append(r.data)
			}
			if _, dup := appends[id]; dup {
				moreAppends[id] = append(moreAppends[id], r)
			} else {
				appends[id] = r
			}
		case clientcore.CompleteRead:
			reads[core.Read(r.from, r.max)] = r
		case clientcore.CompleteTail:
			reads[core.CheckTail()] = r
		case clientcore.CompleteTrim:
			reads[core.Trim(r.upTo)] = r
		}
	}
	ready := func() error {
		rd := core.Ready()
		for _, m := range rd.Messages {
			if m.To == msg.Coordinator {
				proxy.handle(ctx, m, c.cfg.Inbox)
				continue
			}
			c.cfg.Transport.Send(m)
		}
		now := time.Now()
		for _, cp := range rd.Completions {
			switch cp.Kind {
			case clientcore.CompleteAppend:
				finish := func(r request) {
					if cp.Unknown {
						r.finish(result{err: ErrOutcomeUnknown})
						return
					}
					if c.cfg.OnAppendLatency != nil {
						c.cfg.OnAppendLatency(now.Sub(r.start))
					}
					r.finish(result{})
				}
				if r, ok := appends[cp.ID]; ok {
					delete(appends, cp.ID)
					finish(r)
				}
				if rs, ok := moreAppends[cp.ID]; ok {
					delete(moreAppends, cp.ID)
					for _, r := range rs {
						finish(r)
					}
				}
			case clientcore.CompleteRead:
				r, ok := reads[cp.ReqID]
				if !ok {
					continue
				}
				delete(reads, cp.ReqID)
				switch cp.Err {
				case msg.ReadOK:
					r.finish(result{entries: cp.Entries})
				case msg.ReadTrimmed:
					r.finish(result{err: fmt.Errorf("read %d: %w", r.from, ErrTrimmed)})
				default:
					r.finish(result{err: fmt.Errorf("cmdlog: read %d: shard error %d", r.from, cp.Err)})
				}
			case clientcore.CompleteTail, clientcore.CompleteTrim:
				if r, ok := reads[cp.ReqID]; ok {
					delete(reads, cp.ReqID)
					r.finish(result{tail: cp.Tail})
				}
			}
		}
		// Every message was handed on and every completion delivered:
		// the next round reuses their slices.
		core.ReuseReady(rd)
		return nil
	}
	c.coreMu.Lock()
	c.submit, c.ready = submit, ready
	c.coreMu.Unlock()
	// The same loop as every node's: requests and messages queued together
	// are stepped together, then one Ready sends them as shared messages.
	node.Driver[request]{Inbox: c.cfg.Inbox, Tick: tick, Step: core.Step, OnTick: core.Tick,
		Requests: c.reqs, Submit: submit, Ready: ready, Mu: &c.coreMu}.Run(ctx)
	c.coreMu.Lock()
	defer c.coreMu.Unlock()
	c.submit, c.ready = nil, nil
	for _, r := range appends {
		r.finish(result{err: ErrClosed})
	}
	for _, rs := range moreAppends {
		for _, r := range rs {
			r.finish(result{err: ErrClosed})
		}
	}
	for _, r := range reads {
		r.finish(result{err: ErrClosed})
	}
}

// coordProxy answers the client core's view requests from the coordinator.
type coordProxy struct{ c coord.Coordinator }

func (p coordProxy) handle(ctx context.Context, env msg.Envelope, inbox node.Inbox) {
	m, ok := env.Msg.(msg.CoordGet)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, rev, err := p.c.Get(ctx)
		if err != nil {
			return // the core asks again
		}
		inbox.Deliver(msg.Envelope{From: msg.Coordinator, To: env.To, Msg: msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: rev, View: v}})
	}()
}

// Subscription delivers the log's entries in position order, from a
// starting position on, as they become stable.
type Subscription struct {
	c    *Client
	next uint64
	buf  []msg.Entry
}

// Subscribe returns a subscription starting at position from (>= 1).
func (c *Client) Subscribe(from uint64) *Subscription {
	return &Subscription{c: c, next: max(from, 1)}
}

// Position returns the position the next entry will have.
func (s *Subscription) Position() uint64 { return s.next }

// Next returns the next entry, waiting until it is stable.
func (s *Subscription) Next(ctx context.Context) (msg.Entry, error) {
	for len(s.buf) == 0 {
		entries, err := s.c.Read(ctx, s.next, 1024)
		if err != nil {
			return msg.Entry{}, err
		}
		if len(entries) == 0 || entries[0].Pos != s.next {
			return msg.Entry{}, fmt.Errorf("cmdlog: read at %d returned %d entries starting at the wrong position", s.next, len(entries))
		}
		s.buf = entries
	}
	e := s.buf[0]
	s.buf = s.buf[1:]
	s.next = e.Pos + 1
	return e, nil
}
