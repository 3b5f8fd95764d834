// Package jsstore is a shard.Storage on a NATS JetStream stream: a shard
// whose node or disk is lost loses nothing, because its entries live on
// the stream's servers (R3, each syncing every write), not on the node.
// It is the "existing engine under the log" of DESIGN.md §3 and §8: the
// stream is used as it is, with no server-side code, the way the LazyLog
// paper ran Erwin over Kafka.
//
// # How a shard maps onto a stream
//
// The stream is the shard's redo log, and stream sequence ≠ position. Each
// Apply (or ApplyAll, with the lazy writes waiting for it) is one group:
// the encoded shard.Writes, split into as few messages as the server's
// maximum payload allows, published in order, each with
//
//   - Nats-Expected-Last-Sequence = the sequence this writer last wrote,
//     so a second writer on the same stream (a zombie or a mistaken second
//     process for the same shard) is refused rather than interleaved: the
//     first refused Apply fails, and the shard stops (fail closed);
//   - Nats-Msg-Id = writer id (random per Open) and intended sequence, so
//     a publish retried after a lost acknowledgement is recognised instead
//     of stored twice.
//
// Apply returns when the server has acknowledged the group's last message,
// i.e. once a quorum of the stream's replicas stored it. It is durable
// against the loss of a NATS node, its disk or its power only if every
// server syncs each write: `jetstream { sync_interval: always }` in the
// server's config (server.Options.SyncAlways, what natscoord.StartEmbedded
// and StartCluster set by default). Under nats-server's default (a sync every
// 2 minutes) Jepsen lost acknowledged writes (nats-server#7564); a client
// cannot see or set the servers' sync policy, so for an external cluster it
// is the operator's part (docs/nats.md).
//
// Open replays the stream from its first message into memory (an ordered
// consumer), so Get and Scan are served from memory, never from the
// network. A group whose last chunk is missing (the writer died while
// publishing it) is ignored, so each Apply is atomic across a crash.
//
// Rewrites: a flush after a view change truncates the unstable tail and
// re-puts positions above stable-gp with other records. In the redo log
// that is just a later group (DeleteAbove, then Puts); replay applies groups
// in stream order, so the last write of a position wins. Dedup by position
// (a Nats-Msg-Id per position, or a subject per position) would be wrong
// here: it would silently drop exactly that rewrite within the dedup window.
//
// Trims: after a group with a TrimTo, the store purges the stream below the
// oldest group that still holds a live entry or the current Meta (a purge
// of the messages below a sequence). Replaying what is left gives the same
// state: every later write is still there. Purging is housekeeping; if it
// fails it is retried at the next trim.
//
// Memory: every untrimmed entry is held in memory (the Pebble store keeps
// them on disk). Shards are trimmed behind snapshots (DESIGN.md §4), which
// bounds this; a bounded cache with reads from the stream is left for
// when a shard's untrimmed tail outgrows memory.
package jsstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// ErrFenced is wrapped by the error of an Apply that found another writer's
// messages on the stream: this store is no longer its only writer, and it
// refuses every later write.
var ErrFenced = errors.New("jsstore: another writer appended to the shard's stream")

// ErrClosed is returned by the methods of a Store after Close.
var ErrClosed = errors.New("jsstore: store is closed")

// Options configures a Store. Only Stream is required.
type Options struct {
	// Stream is the JetStream stream name (letters, digits, '-', '_').
	// Open creates it if it does not exist; an existing stream is used as
	// configured. One stream per shard.
	Stream string
	// Subject is the stream's only subject; default "broadside.shard." +
	// Stream.
	Subject string
	// Replicas is the stream's replication factor when Open creates it:
	// default 3 (a cluster); 1 for a single server (development only: that
	// server's disk is then the only copy).
	Replicas int
	// PublishTimeout bounds one publish attempt; default 5 s.
	PublishTimeout time.Duration
	// RetryFor is how long Apply keeps retrying a publish that failed
	// without an answer (a stream leader election after a NATS node died,
	// a reconnect) before it fails; default 30 s.
	RetryFor time.Duration
	// MaxMessageBytes caps a stream message; default the server's maximum
	// payload less 1 KiB for headers. Larger groups are split.
	MaxMessageBytes int
	// Logger receives reports of failed purges; nil means slog.Default().
	Logger *slog.Logger
}

// validStream is JetStream's rule for stream names, narrowed to what is safe
// in a subject too.
var validStream = regexp.MustCompile(`^[-_a-zA-Z0-9]+$`)

// Store is a shard.Storage on a JetStream stream. It is safe for concurrent
// use; writes are serialised. Scan's fn may call the Store's methods.
type Store struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	opts    Options
	writer  string // this Open's writer id, in every Nats-Msg-Id
	maxBody int    // chunk size of a group
	log     *slog.Logger

	wmu     sync.Mutex  // serialises writers
	last    uint64      // the stream sequence this writer last wrote (or found at Open)
	pending *shard.Meta // a lazy Meta, published with the next group
	broken  error       // first write failure: the stream's content is unknown
	buf     []byte

	mu      sync.RWMutex
	closed  bool
	entries []slot // sorted by Pos, unique
	meta    shard.Meta
	metaAt  uint64 // group of the last published Meta (0: none)
}

// slot is an entry and the group (stream sequence) that wrote it.
type slot struct {
	e     msg.Entry
	group uint64
}

var (
	_ shard.Storage      = (*Store)(nil)
	_ shard.BatchApplier = (*Store)(nil)
	_ shard.LazyApplier  = (*Store)(nil)
)

// Open opens the shard store on opts.Stream in js, creating the stream if
// needed, and replays it into memory. The Store becomes the stream's writer:
// if another Store still writes to it, whichever writes second fails.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if !validStream.MatchString(opts.Stream) {
		return nil, fmt.Errorf("jsstore: stream name %q: want letters, digits, '-' and '_'", opts.Stream)
	}
	if opts.Subject == "" {
		opts.Subject = "broadside.shard." + opts.Stream
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Replicas < 1 || opts.Replicas > 5 {
		return nil, fmt.Errorf("jsstore: %d replicas, want 1..5", opts.Replicas)
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 5 * time.Second
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 30 * time.Second
	}
	maxMsg := opts.MaxMessageBytes
	if maxMsg <= 0 {
		maxMsg = int(js.Conn().MaxPayload()) - 1024
	}
	if maxMsg <= headerLen+16 {
		return nil, fmt.Errorf("jsstore: maximum message size %d is too small", maxMsg)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("jsstore: writer id: %w", err)
	}
	s := &Store{js: js, opts: opts, writer: hex.EncodeToString(id[:]), maxBody: maxMsg - headerLen,
		log: log.With("component", "jsstore", "stream", opts.Stream)}
	st, err := js.Stream(ctx, opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        opts.Stream,
			Description: "Broadside cmdlog shard: a redo log of shard writes (cmdlog/shardstore/jsstore)",
			Subjects:    []string{opts.Subject},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardNew, // never drop entries to make room: fail the write
			MaxMsgs:     -1,
			MaxBytes:    -1,
			Storage:     jetstream.FileStorage,
			Replicas:    opts.Replicas,
			Duplicates:  2 * time.Minute,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created concurrently
			st, err = js.Stream(ctx, opts.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jsstore: stream %s: %w", opts.Stream, err)
	}
	s.stream = st
	if err := waitForLeader(ctx, st); err != nil {
		return nil, fmt.Errorf("jsstore: stream %s: %w", opts.Stream, err)
	}
	// Replay again from scratch while a NATS node is coming or going (a
	// consumer that cannot be placed, a request that times out), until
	// ctx ends.
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.replay(actx)
		cancel()
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrCorrupt) {
			return nil, fmt.Errorf("jsstore: stream %s: replay (attempt %d): %w", opts.Stream, attempt, err)
		}
		s.log.Warn("replay failed; retrying", "attempt", attempt, "err", err)
		s.entries, s.meta, s.metaAt = nil, shard.Meta{}, 0
		time.Sleep(100 * time.Millisecond)
	}
}

// replay rebuilds the state from the stream's messages up to its last
// sequence at the time of the call, which becomes s.last.
func (s *Store) replay(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return err
	}
	s.last = info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	// An ephemeral pull consumer without acknowledgements, in memory: it
	// goes away after InactiveThreshold if this process dies mid-replay.
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return err
	}
	defer s.stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) //nolint:errcheck // it expires anyway
	var group uint64
	var body []byte
	var seen uint64
	for idle := 0; ; {
		batch, err := cons.Fetch(1024, jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrNoResponders) && idle < 100 && ctx.Err() == nil {
			// A consumer just created may not run on its server yet.
			idle++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("after sequence %d of %d..%d: %w", seen, info.State.FirstSeq, s.last, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			seen = seq
			if seq > s.last {
				return nil // written after Open looked: the next Apply is fenced
			}
			g, lastChunk, chunk, err := decodeChunk(m.Data())
			if err != nil {
				return fmt.Errorf("message %d: %w", seq, err)
			}
			if g != group { // a new group; an unfinished one before it was a crash mid-Apply
				group, body = g, body[:0]
			}
			body = append(body, chunk...)
			if lastChunk {
				ws, err := decodeBody(body)
				if err != nil {
					return fmt.Errorf("group %d: %w", group, err)
				}
				for i := range ws {
					s.applyState(&ws[i], group)
				}
				group, body = 0, body[:0]
			}
			if seq == s.last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("after sequence %d of %d..%d: %w", seen, info.State.FirstSeq, s.last, err)
		}
		if n > 0 {
			idle = 0
		} else if idle++; idle >= 30 || ctx.Err() != nil {
			return fmt.Errorf("after sequence %d of %d..%d: no messages in %d fetches", seen, info.State.FirstSeq, s.last, idle)
		}
	}
}

// Get returns the entry at pos, if present.
func (s *Store) Get(pos uint64) (msg.Entry, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return msg.Entry{}, false, fmt.Errorf("jsstore: get %d: %w", pos, ErrClosed)
	}
	i, ok := s.search(pos)
	if !ok {
		return msg.Entry{}, false, nil
	}
	return shard.CopyEntry(s.entries[i].e), true, nil
}

// Scan calls fn for present entries with from <= Pos <= to in ascending
// order until fn returns false. fn runs without the store's lock; entries
// applied while a Scan runs may or may not be visited.
func (s *Store) Scan(from, to uint64, fn func(msg.Entry) bool) error {
	return shard.ScanInChunks(from, to, func(from, to uint64, buf []msg.Entry) ([]msg.Entry, error) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return nil, fmt.Errorf("jsstore: scan %d..%d: %w", from, to, ErrClosed)
		}
		i, _ := s.search(from)
		for ; i < len(s.entries) && len(buf) < shard.ScanChunk && s.entries[i].e.Pos <= to; i++ {
			buf = append(buf, shard.CopyEntry(s.entries[i].e))
		}
		return buf, nil
	}, fn)
}

// Meta returns the stored Meta (zero value if none was stored).
func (s *Store) Meta() (shard.Meta, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return shard.Meta{}, fmt.Errorf("jsstore: meta: %w", ErrClosed)
	}
	return s.meta, nil
}

// Apply publishes w (with a lazy Meta waiting, if any) as one group and
// returns once the stream has acknowledged it. An empty w with nothing
// waiting does nothing.
func (s *Store) Apply(w shard.Writes) error {
	return s.ApplyAll([]shard.Writes{w})
}

// ApplyAll publishes ws, in order, as one group (atomic across a crash)
// and returns once the stream has acknowledged it.
func (s *Store) ApplyAll(ws []shard.Writes) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("jsstore: apply: %w", err)
	}
	all := nonEmpty(ws)
	if s.pending != nil {
		all = append([]shard.Writes{{Meta: s.pending}}, all...)
	}
	if len(all) == 0 {
		return nil
	}
	group := s.last + 1
	if err := s.publish(all); err != nil {
		s.broken = err
		return fmt.Errorf("jsstore: apply: %w", err)
	}
	trimmed := false
	s.mu.Lock()
	if s.pending != nil { // the lazy Meta is in this group now
		s.metaAt = group
		s.pending = nil
	}
	for i := range ws {
		s.applyState(&ws[i], group)
		trimmed = trimmed || ws[i].TrimTo > 0
	}
	s.mu.Unlock()
	if trimmed {
		s.purge()
	}
	return nil
}

// ApplyLazy applies ws without waiting (shard.Writes.Lazy). A Meta-only
// write (a stable-gp announcement, the only lazy write a shard makes) is
// visible to Meta at once and published with the next Apply or ApplyAll: a
// crash before it loses it, and only the latest one is kept. Any other
// write is published at once, as by ApplyAll.
func (s *Store) ApplyLazy(ws []shard.Writes) error {
	for i := range ws {
		if !ws[i].Empty() && !metaOnly(&ws[i]) {
			return s.ApplyAll(ws)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("jsstore: apply: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ws {
		if ws[i].Meta != nil {
			m := *ws[i].Meta
			s.pending = &m
			s.meta = m // s.metaAt stays the group of the last published Meta
		}
	}
	return nil
}

// Close publishes a lazy Meta still waiting (best effort) and releases the
// store; the connection is the caller's. Calls after Close return ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var err error
	if s.broken == nil && s.pending != nil && !s.isClosed() {
		if err = s.publish([]shard.Writes{{Meta: s.pending}}); err != nil {
			err = fmt.Errorf("jsstore: close: flush lazy writes: %w", err)
		}
		s.pending = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.entries = nil
	return err
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// writable reports why the store cannot write, if it cannot. Called with wmu.
func (s *Store) writable() error {
	if s.isClosed() {
		return ErrClosed
	}
	if s.broken != nil {
		return fmt.Errorf("an earlier write failed: %w", s.broken)
	}
	return nil
}

// publish writes ws as one group of messages after s.last. Called with wmu.
func (s *Store) publish(ws []shard.Writes) error {
	s.buf = appendBody(s.buf[:0], ws)
	body := s.buf
	group := s.last + 1
	for {
		n := min(len(body), s.maxBody)
		chunk, rest := body[:n], body[n:]
		if err := s.publishOne(encodeChunk(group, len(rest) == 0, chunk)); err != nil {
			return err
		}
		if len(rest) == 0 {
			return nil
		}
		body = rest
	}
}

// publishOne publishes data as stream sequence s.last+1, retrying failures
// without an answer for up to RetryFor, and advances s.last. Called with wmu.
func (s *Store) publishOne(data []byte) error {
	seq := s.last + 1
	id := s.writer + "-" + fmt.Sprint(seq)
	deadline := time.Now().Add(s.opts.RetryFor)
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.opts.Subject, Data: data},
			jetstream.WithMsgID(id), jetstream.WithExpectLastSequence(s.last))
		cancel()
		if err == nil {
			if ack.Sequence != seq {
				return fmt.Errorf("%w: published as sequence %d, expected %d", ErrFenced, ack.Sequence, seq)
			}
			s.last = seq
			return nil
		}
		// Wrong last sequence: either our own earlier attempt landed (its
		// acknowledgement was lost) or another writer appended. Look.
		if isWrongLastSeq(err) || attempt > 1 {
			mine, found, cerr := s.landed(seq, id)
			switch {
			case cerr == nil && mine:
				s.last = seq
				return nil
			case cerr == nil && found:
				return fmt.Errorf("%w: sequence %d was written by someone else", ErrFenced, seq)
			case cerr == nil && isWrongLastSeq(err):
				return fmt.Errorf("%w: the stream moved past sequence %d: %v", ErrFenced, s.last, err)
			}
		}
		if isPermanent(err) {
			return fmt.Errorf("publish sequence %d: %w", seq, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publish sequence %d: no acknowledgement after %d attempts in %v: %w", seq, attempt, s.opts.RetryFor, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// landed looks up stream sequence seq: whether it exists and whether it is
// the message with Nats-Msg-Id id.
func (s *Store) landed(seq uint64, id string) (mine, found bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
	defer cancel()
	m, err := s.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return m.Header.Get(jetstream.MsgIDHeader) == id, true, nil
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// jsErrCodeDuplicateMessageConflict is nats-server's "duplicate message id
// is in process" (409), which nats.go does not name.
const jsErrCodeDuplicateMessageConflict jetstream.ErrorCode = 10158

// isPermanent reports errors a retry cannot fix: the server answered and
// refused (other than a wrong last sequence, handled by the caller).
func isPermanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return false
		case jetstream.JSErrCodeStreamNotFound:
			return true
		case jsErrCodeDuplicateMessageConflict:
			// An earlier attempt with this Nats-Msg-Id is still being
			// proposed (the stream leader changed under it): wait for it.
			return false
		}
		// Storage full, message too large, etc.: 4xx codes.
		return apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrConnectionClosed)
}

// purge removes the stream's messages below the oldest group still needed.
func (s *Store) purge() {
	s.mu.RLock()
	keep := s.last + 1
	if s.metaAt > 0 {
		keep = min(keep, s.metaAt)
	}
	for _, sl := range s.entries {
		keep = min(keep, sl.group)
	}
	s.mu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
	defer cancel()
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSequence(keep)); err != nil {
		s.log.Warn("purge of trimmed messages failed; retried at the next trim", "below", keep, "err", err)
	}
}

// applyState applies w to the in-memory state as written by group. Called
// with mu held for writing (or during Open).
func (s *Store) applyState(w *shard.Writes, group uint64) {
	for _, e := range w.Puts {
		sl := slot{e: shard.CopyEntry(e), group: group}
		i, found := s.search(e.Pos)
		switch {
		case found:
			s.entries[i] = sl
		case i == len(s.entries):
			s.entries = append(s.entries, sl)
		default:
			s.entries = slices.Insert(s.entries, i, sl)
		}
	}
	if w.HasDeleteAbove && w.DeleteAbove < math.MaxUint64 {
		i, _ := s.search(w.DeleteAbove + 1)
		clear(s.entries[i:])
		s.entries = s.entries[:i]
	}
	if w.TrimTo > 0 {
		i := len(s.entries)
		if w.TrimTo < math.MaxUint64 {
			i, _ = s.search(w.TrimTo + 1)
		}
		s.entries = slices.Delete(s.entries, 0, i)
	}
	if w.Meta != nil {
		s.meta = *w.Meta
		s.metaAt = group
	}
}

// search returns the index of the first entry with Pos >= pos and whether
// its Pos is pos.
func (s *Store) search(pos uint64) (int, bool) {
	return slices.BinarySearchFunc(s.entries, pos, func(sl slot, p uint64) int {
		switch {
		case sl.e.Pos < p:
			return -1
		case sl.e.Pos > p:
			return 1
		}
		return 0
	})
}

func nonEmpty(ws []shard.Writes) []shard.Writes {
	out := make([]shard.Writes, 0, len(ws))
	for i := range ws {
		if !ws[i].Empty() {
			out = append(out, ws[i])
		}
	}
	return out
}

func metaOnly(w *shard.Writes) bool {
	return w.Meta != nil && len(w.Puts) == 0 && !w.HasDeleteAbove && w.TrimTo == 0
}

// waitForLeader waits until st has a leader: a replicated stream just
// created may not have one yet, and requests to it fail with "no
// responders".
func waitForLeader(ctx context.Context, st jetstream.Stream) error {
	for {
		info, err := st.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
