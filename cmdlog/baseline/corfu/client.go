package corfu

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/cmdlog/baseline/pipe"
	"github.com/anoptic/broadside/netcode/transport"
)

// ErrClosed is returned by calls on a closed client.
var ErrClosed = errors.New("corfu: client closed")

// ClientConfig configures a Client.
type ClientConfig struct {
	// Sequencer is the sequencer's address.
	Sequencer string
	// Chain lists the storage replicas' addresses, head first.
	Chain []string
	// ClientTLS trusts the nodes' certificates (and presents a client
	// certificate where they demand one).
	ClientTLS *tls.Config
	// MaxBatch caps the records of one batch (default 256, at most
	// MaxBatch).
	MaxBatch int
	// MaxInflightBatches caps batches between token request and chain
	// tail acknowledgement (default 16). While the cap is reached, new
	// appends queue and leave together in the next batch.
	MaxInflightBatches int
	Logger             *slog.Logger
}

// Client appends to and reads from a Corfu-style log. Append takes a range
// of positions from the sequencer (1 round trip), then writes the records
// to each replica of the chain in turn, head to tail, waiting for each
// acknowledgement (one round trip per replica): 4 round trips for 3
// replicas. Concurrent appends are batched: appends issued while earlier
// batches are being dispatched, or while MaxInflightBatches are in flight,
// share one token request and one write per replica. Requests are
// pipelined on one long-lived stream per node.
//
// The chain write is client-driven as in the Corfu paper; the sequencer
// is trusted to hand out each position once, and the replicas enforce
// write-once, so a position can never hold two different records.
type Client struct {
	cfg   ClientConfig
	ep    *transport.Endpoint
	seq   *pipe.Client
	chain []*pipe.Client

	mu          sync.Mutex
	queue       []*pendingAppend
	inflight    int
	dispatching bool
	closed      bool
}

type pendingAppend struct {
	data []byte
	done chan appendResult
}

type appendResult struct {
	pos uint64
	err error
}

type batch struct {
	c       *Client
	appends []*pendingAppend
	first   uint64
	req     []byte // the write request sent to every replica
}

// Dial connects to the sequencer and every replica of the chain.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.Chain) == 0 {
		return nil, errors.New("corfu: dial: empty chain")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	cfg.MaxBatch = min(cfg.MaxBatch, MaxBatch)
	if cfg.MaxInflightBatches <= 0 {
		cfg.MaxInflightBatches = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ep, err := transport.NewEndpoint(transport.Config{
		ListenAddr: "127.0.0.1:0", ClientTLS: cfg.ClientTLS, ALPN: []string{ALPN}, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("corfu: dial: %w", err)
	}
	c := &Client{cfg: cfg, ep: ep}
	if c.seq, err = pipe.Dial(ctx, ep, cfg.Sequencer); err != nil {
		_ = ep.Close()
		return nil, fmt.Errorf("corfu: dial sequencer: %w", err)
	}
	for i, addr := range cfg.Chain {
		pc, err := pipe.Dial(ctx, ep, addr)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("corfu: dial replica %d: %w", i+1, err)
		}
		c.chain = append(c.chain, pc)
	}
	return c, nil
}

// Close closes the connections; appends in flight fail.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	queued := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, p := range queued {
		p.done <- appendResult{err: ErrClosed}
	}
	if c.seq != nil {
		_ = c.seq.Close()
	}
	for _, pc := range c.chain {
		_ = pc.Close()
	}
	_ = c.ep.Close()
}

// Append appends data and returns its position once every replica of the
// chain has stored it. data must not be modified until Append returns. If
// ctx ends first, the append may still complete.
func (c *Client) Append(ctx context.Context, data []byte) (uint64, error) {
	if len(data) > maxRecord {
		return 0, fmt.Errorf("corfu: append: record of %d bytes exceeds %d", len(data), maxRecord)
	}
	p := &pendingAppend{data: data, done: make(chan appendResult, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	c.queue = append(c.queue, p)
	c.mu.Unlock()
	c.dispatch(false)
	select {
	case r := <-p.done:
		return r.pos, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// dispatch starts batches from the queue while the in-flight cap allows.
// One goroutine dispatches at a time; the others only queue, and their
// appends leave in the dispatcher's next batch. async is set on reader
// goroutines (reply callbacks), which must not block on the network.
func (c *Client) dispatch(async bool) {
	c.mu.Lock()
	if c.dispatching {
		c.mu.Unlock()
		return
	}
	c.dispatching = true
	for len(c.queue) > 0 && c.inflight < c.cfg.MaxInflightBatches && !c.closed {
		n := min(len(c.queue), c.cfg.MaxBatch)
		b := &batch{c: c, appends: make([]*pendingAppend, n)}
		copy(b.appends, c.queue)
		rest := copy(c.queue, c.queue[n:])
		clear(c.queue[rest:])
		c.queue = c.queue[:rest]
		c.inflight++
		c.mu.Unlock()
		b.start(async)
		c.mu.Lock()
	}
	c.dispatching = false
	c.mu.Unlock()
}

// start asks the sequencer for positions; the chain write follows from the
// reply callbacks, on the connections' reader goroutines, which issue their
// requests with SendAsync: a reader blocked on another stream's flow
// control could otherwise close a cycle of streams waiting on each other.
func (b *batch) start(async bool) {
	req := appendTokenRequest(make([]byte, 0, 8), len(b.appends))
	send := b.c.seq.Send
	if async {
		send = b.c.seq.SendAsync
	}
	if err := send(req, b.onToken); err != nil {
		b.finish(err)
	}
}

func (b *batch) onToken(body []byte, err error) {
	if err == nil {
		b.first, err = decodeTokenReply(body)
	}
	if err != nil {
		b.finish(fmt.Errorf("corfu: token: %w", err))
		return
	}
	size := 13
	records := make([][]byte, len(b.appends))
	for i, p := range b.appends {
		records[i] = p.data
		size += 4 + len(p.data)
	}
	b.req = appendWriteRequest(make([]byte, 0, size), b.first, records)
	b.write(0)
}

// write sends the batch to replica i of the chain.
func (b *batch) write(i int) {
	err := b.c.chain[i].SendAsync(b.req, func(body []byte, err error) {
		if err == nil {
			if len(body) != 1 {
				err = fmt.Errorf("%w: write reply of %d bytes", errMalformed, len(body))
			} else {
				err = statusErr(body[0])
			}
		}
		switch {
		case err != nil:
			b.finish(fmt.Errorf("corfu: write %d..%d to replica %d: %w", b.first, b.first+uint64(len(b.appends))-1, i+1, err))
		case i+1 < len(b.c.chain):
			b.write(i + 1)
		default:
			b.finish(nil)
		}
	})
	if err != nil {
		b.finish(fmt.Errorf("corfu: write to replica %d: %w", i+1, err))
	}
}

func (b *batch) finish(err error) {
	for i, p := range b.appends {
		if err != nil {
			p.done <- appendResult{err: err}
		} else {
			p.done <- appendResult{pos: b.first + uint64(i)}
		}
	}
	b.c.mu.Lock()
	b.c.inflight--
	b.c.mu.Unlock()
	b.c.dispatch(true)
}

// Read returns the record at pos from the tail of the chain, the replica
// that holds only fully replicated records.
func (c *Client) Read(ctx context.Context, pos uint64) ([]byte, error) {
	if pos == 0 {
		return nil, errors.New("corfu: read: positions start at 1")
	}
	body, err := c.chain[len(c.chain)-1].Call(ctx, appendReadRequest(nil, pos))
	if err != nil {
		return nil, fmt.Errorf("corfu: read %d: %w", pos, err)
	}
	if len(body) == 0 {
		return nil, fmt.Errorf("corfu: read %d: %w: empty reply", pos, errMalformed)
	}
	if err := statusErr(body[0]); err != nil {
		return nil, fmt.Errorf("corfu: read %d: %w", pos, err)
	}
	return body[1:], nil
}
