package corfu

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/cmdlog/baseline/pipe"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/netcode/transport"
)

// Group-commit limits of a storage node: one storage batch takes at most
// this many write requests or bytes.
const (
	maxCommitRequests = 1024
	maxCommitBytes    = 8 << 20
)

// writeQueue bounds write requests waiting for the committer.
const writeQueue = 4096

// StorageNode is one replica of the chain (Corfu's "log unit"): it stores
// entries at the positions the writer names, each position at most once,
// and acknowledges a write only after its storage has applied it. Writes
// that arrive together, from any connection, are group-committed in one
// storage batch, as cmdlog's shards do.
type StorageNode struct {
	srv    *server
	store  shard.Storage
	log    *slog.Logger
	writes chan *writeReq
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// written is the write-once index; only the committer touches it
	// after start.
	written positionSet
}

type writeReq struct {
	id      uint64
	first   uint64
	records [][]byte // alias body
	body    []byte
	st      *transport.Stream
	status  byte
}

// StartStorageNode starts a replica on store (which it does not close).
// The write-once index is rebuilt from what store holds.
func StartStorageNode(cfg NodeConfig, store shard.Storage) (*StorageNode, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &StorageNode{store: store, log: cfg.Logger, writes: make(chan *writeReq, writeQueue)}
	if err := store.Scan(1, ^uint64(0), func(e msg.Entry) bool { n.written.add(e.Pos); return true }); err != nil {
		return nil, fmt.Errorf("corfu: storage node: rebuild index: %w", err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Go(n.commitLoop)
	srv, err := startServer(cfg, n.serve)
	if err != nil {
		n.cancel()
		n.wg.Wait()
		return nil, err
	}
	n.srv = srv
	return n, nil
}

// Addr returns the address clients dial.
func (n *StorageNode) Addr() string { return n.srv.addr() }

// Close stops the node (not its storage).
func (n *StorageNode) Close() error {
	err := n.srv.close()
	n.cancel()
	n.wg.Wait()
	return err
}

// serve reads the requests of one stream: writes go to the committer,
// reads are answered at once.
func (n *StorageNode) serve(st *transport.Stream) {
	r := pipe.NewResponder(st)
	var out []byte
	for {
		id, body, err := r.Next()
		if err != nil {
			return
		}
		if len(body) == 0 {
			out = pipe.AppendReply(out[:0], id, []byte{statusBad})
			if err := st.WriteFrame(out); err != nil {
				return
			}
			continue
		}
		switch body[0] {
		case opWrite:
			w := &writeReq{id: id, body: append([]byte(nil), body...), st: st}
			var err error
			if w.first, w.records, err = decodeWriteRequest(w.body, nil); err != nil {
				out = pipe.AppendReply(out[:0], id, []byte{statusBad})
				if err := st.WriteFrame(out); err != nil {
					return
				}
				continue
			}
			select {
			case n.writes <- w:
			case <-n.ctx.Done():
				return
			}
		case opRead:
			out = n.read(out[:0], id, body)
			if err := st.WriteFrame(out); err != nil {
				return
			}
		default:
			out = pipe.AppendReply(out[:0], id, []byte{statusBad})
			if err := st.WriteFrame(out); err != nil {
				return
			}
		}
	}
}

func (n *StorageNode) read(out []byte, id uint64, body []byte) []byte {
	pos, err := decodeReadRequest(body)
	if err != nil {
		return pipe.AppendReply(out, id, []byte{statusBad})
	}
	e, ok, err := n.store.Get(pos)
	switch {
	case err != nil:
		n.log.Error("corfu: storage node read failed", "pos", pos, "err", err)
		return pipe.AppendReply(out, id, []byte{statusStorage})
	case !ok:
		return pipe.AppendReply(out, id, []byte{statusUnwritten})
	}
	return pipe.AppendReply(out, id, []byte{statusOK}, e.Record.Data)
}

// commitLoop applies queued writes in groups: everything queued while the
// previous group was being applied goes into the next storage batch.
func (n *StorageNode) commitLoop() {
	var (
		group   []*writeReq
		puts    []msg.Entry
		streams []*transport.Stream
		out     []byte
	)
	for {
		group = group[:0]
		select {
		case w := <-n.writes:
			group = append(group, w)
		case <-n.ctx.Done():
			return
		}
		bytes := len(group[0].body)
	drain:
		for len(group) < maxCommitRequests && bytes < maxCommitBytes {
			select {
			case w := <-n.writes:
				group = append(group, w)
				bytes += len(w.body)
			default:
				break drain
			}
		}
		puts = puts[:0]
		for _, w := range group {
			w.status = statusOK
			last := w.first + uint64(len(w.records)) - 1
			if n.written.anyIn(w.first, last) {
				w.status = statusWritten
				continue
			}
			for i, rec := range w.records {
				pos := w.first + uint64(i)
				n.written.add(pos)
				puts = append(puts, msg.Entry{Pos: pos, Record: msg.Record{Data: rec}})
			}
		}
		if len(puts) > 0 {
			if err := n.store.Apply(shard.Writes{Puts: puts}); err != nil {
				n.log.Error("corfu: storage node apply failed", "err", err)
				for _, w := range group {
					if w.status == statusOK {
						w.status = statusStorage
						for i := range w.records {
							n.written.remove(w.first + uint64(i))
						}
					}
				}
			}
		}
		clear(puts) // drop references to the bodies
		streams = streams[:0]
		for i, w := range group {
			out = pipe.AppendReply(out[:0], w.id, []byte{w.status})
			if err := w.st.BufferFrame(out); err == nil && !containsStream(streams, w.st) {
				streams = append(streams, w.st)
			}
			group[i] = nil
		}
		for _, st := range streams {
			_ = st.Flush()
		}
		clear(streams)
	}
}

func containsStream(sts []*transport.Stream, st *transport.Stream) bool {
	for _, s := range sts {
		if s == st {
			return true
		}
	}
	return false
}

// positionSet is a sparse bitmap of positions, in pages of 64 Ki
// positions, so that hostile or sparse positions cannot make it allocate
// more than a page per request range touched.
type positionSet struct {
	pages map[uint64]*[1024]uint64
}

const pageBits = 1 << 16

func (s *positionSet) add(pos uint64) {
	if s.pages == nil {
		s.pages = make(map[uint64]*[1024]uint64)
	}
	p := s.pages[pos/pageBits]
	if p == nil {
		p = new([1024]uint64)
		s.pages[pos/pageBits] = p
	}
	off := pos % pageBits
	p[off/64] |= 1 << (off % 64)
}

func (s *positionSet) remove(pos uint64) {
	if p := s.pages[pos/pageBits]; p != nil {
		off := pos % pageBits
		p[off/64] &^= 1 << (off % 64)
	}
}

func (s *positionSet) has(pos uint64) bool {
	p := s.pages[pos/pageBits]
	if p == nil {
		return false
	}
	off := pos % pageBits
	return p[off/64]&(1<<(off%64)) != 0
}

// anyIn reports whether any position in [from, to] is in the set.
func (s *positionSet) anyIn(from, to uint64) bool {
	for pos := from; pos <= to; pos++ {
		if s.has(pos) {
			return true
		}
		if pos == to { // to may be the largest uint64
			break
		}
	}
	return false
}
