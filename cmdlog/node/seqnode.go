package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
)

// WAL is a sequencing replica's write-ahead log. Append makes ops durable
// (synced) before it returns; Load returns every op appended so far, in
// order, except that it may leave out everything before the newest
// PersistCheckpoint (which the replica's recovery does not need). In
// memory durability only PersistStartView ops are written.
type WAL interface {
	Append(ops []seq.PersistOp) error
	Load() ([]seq.PersistOp, error)
}

// SeqConfig configures a sequencing replica node.
type SeqConfig struct {
	Core   seq.Config
	Timing Timing
	// Coordinator stores the view record.
	Coordinator coord.Coordinator
	// WAL persists what the replica must not forget. Required.
	WAL       WAL
	Transport Transport
	Inbox     Inbox
	Logger    *slog.Logger
	// Observe, if set, is called after every Ready with the core (for
	// metrics and tests). It runs on the node goroutine: keep it short.
	Observe func(*seq.Replica)
	// Health, if set, lists the replica while its WAL cannot store.
	Health *StorageHealth
}

// RunSeq runs a sequencing replica until ctx ends. The replica resumes from
// its WAL: in fsync durability with its records; in memory durability
// with only the knowledge of which views it served (so it never serves one
// of them again with an empty memory).
func RunSeq(ctx context.Context, cfg SeqConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ops, err := cfg.WAL.Load()
	if err != nil {
		return fmt.Errorf("seq %d: load wal: %w", cfg.Core.ID, err)
	}
	var r *seq.Replica
	if cfg.Core.Durability == seq.Fsync {
		r = seq.Recover(cfg.Core, ops)
	} else {
		var last uint64
		for _, op := range ops {
			switch {
			case op.Kind == seq.PersistStartView:
				last = max(last, op.View.Number)
			case op.Kind == seq.PersistCheckpoint && op.Checkpoint != nil:
				last = max(last, op.Checkpoint.View.Number)
			}
		}
		r = seq.New(cfg.Core, last)
	}
	log.Info("sequencing replica starting", "id", cfg.Core.ID, "durability", durabilityName(cfg.Core.Durability),
		"last_started_view", r.LastStartedView(), "wal_ops", len(ops))
	proxy := coordinatorProxy{c: cfg.Coordinator, timeout: 5 * time.Second, log: log}
	view, role := uint64(0), seq.RoleNone
	// In memory durability a link's reader steps the replica itself when
	// it is free (Driver.Mu): no hand-off. In fsync durability every round
	// syncs the WAL, and a reader stepping each message in a round of its
	// own would sync once per message instead of once per batch of the
	// messages that arrived during the previous sync (measured: the
	// 1-appender mean 590 -> 1005 µs), so there the loop steps them.
	var mu *sync.Mutex
	if cfg.Core.Durability != seq.Fsync {
		mu = new(sync.Mutex)
	}
	// In fsync durability a round whose only writes are GCs (this
	// replica's part of an ordering round) is not synced on its own: it is
	// held, and its operations join the next round that writes anything
	// else (an Append's records) or the next tick's round, in one synced
	// batch. Its messages, and those of every round after it, are sent
	// only once that batch is synced, in order: nothing leaves the node
	// before what it follows from is on disk, as if the held rounds had
	// been slower. At one appender it takes the ordering round's sync
	// (one per replica per round, about one per append) off the disk the
	// appends' own syncs queue on; the ordering round's acknowledgements
	// wait for the next append's sync, or a tick when idle.
	var held gcHold
	ticked := false
	onTick := func() {
		ticked = true
		r.Tick()
	}
	send := func(m msg.Envelope) {
		if m.To == msg.Coordinator {
			proxy.handle(ctx, m, func(e msg.Envelope) { cfg.Inbox.Deliver(e) })
			return
		}
		cfg.Transport.Send(m)
	}
	// A failed WAL write (ENOSPC, EIO) is retried, not fatal: the
	// round's acknowledgements wait until the write succeeds.
	who := fmt.Sprintf("seq %d's WAL", cfg.Core.ID)
	retry := func(write func() error) error { return persistRetrying(ctx, log, cfg.Health, who, write) }
	// In fsync durability on a WAL that can wait for a sync apart, the
	// loop starts each round's write and goes on stepping while a sync
	// pipe sends the round's messages once its sync (and every earlier
	// one) returned; heartbeats leave at once, so a slow sync no longer
	// silences the replica (see syncPipe).
	var pipe *syncPipe
	var wake <-chan struct{}
	pw, pipelined := cfg.WAL.(PipelinedWAL)
	if cfg.Core.Durability == seq.Fsync && pipelined {
		pipe = newSyncPipe(ctx, send)
		defer pipe.close()
		wake = pipe.wake
	}
	return Driver[struct{}]{Inbox: cfg.Inbox, Tick: cfg.Timing.tick(), Step: r.Step, OnTick: onTick, Mu: mu, Wake: wake, Ready: func() error {
		if pipe != nil && !ticked && pipe.hold() {
			// What was stepped joins the round carried out when the sync
			// in flight returns (the pipe wakes the loop).
			return nil
		}
		rd := r.Ready()
		tick := ticked
		ticked = false
		if cfg.Core.Durability == seq.Fsync {
			rd.Messages = sendLiveness(rd.Messages, send)
			rd = held.round(rd, tick)
		}
		if pipe != nil {
			if !pipe.round(ctx, pw, retry, rd.Persist, rd.Messages) {
				return nil // ctx ended: stop without sending what was not stored
			}
		} else {
			if len(rd.Persist) > 0 {
				if err := retry(func() error { return cfg.WAL.Append(rd.Persist) }); err != nil {
					return nil // ctx ended: stop without sending what was not stored
				}
			}
			for _, m := range rd.Messages {
				send(m)
			}
			if cfg.Core.Durability != seq.Fsync {
				// Nothing holds the round's messages (fsync durability's
				// held rounds do): the next round reuses their slice.
				r.ReuseReady(rd)
			}
		}
		for _, v := range r.Violations() {
			log.Error("invariant violated", "detail", v)
		}
		if r.View() != view || r.Role() != role {
			view, role = r.View(), r.Role()
			log.Info("view", "id", cfg.Core.ID, "view", view, "role", role.String(), "last_ordered_gp", r.LastOrderedGP())
		}
		if cfg.Observe != nil {
			cfg.Observe(r)
		}
		return nil
	}}.Run(ctx)
}

// sendLiveness sends the liveness messages among ms at once and returns
// the others, in order.
func sendLiveness(ms []msg.Envelope, send func(msg.Envelope)) []msg.Envelope {
	n := 0
	for _, m := range ms {
		if liveness(m.Msg) {
			send(m)
			continue
		}
		ms[n] = m
		n++
	}
	return ms[:n]
}

// gcHold holds a sequencing replica's rounds whose only writes are GCs
// (see RunSeq) until a round that writes anything else, or a tick's.
type gcHold struct{ held seq.Ready }

// round takes one round's Ready and returns what to carry out now: the
// held rounds' operations and messages followed by this round's, or
// nothing if this round is held too (it writes only GCs, or nothing while
// rounds are held, and is not a tick's).
func (h *gcHold) round(rd seq.Ready, tick bool) seq.Ready {
	if len(h.held.Persist) == 0 && !gcOnly(rd.Persist) {
		return rd
	}
	h.held.Persist = append(h.held.Persist, rd.Persist...)
	h.held.Messages = append(h.held.Messages, rd.Messages...)
	if !tick && (len(rd.Persist) == 0 || gcOnly(rd.Persist)) {
		return seq.Ready{}
	}
	out := h.held
	h.held = seq.Ready{}
	return out
}

// gcOnly reports whether ops are one or more GCs and nothing else.
func gcOnly(ops []seq.PersistOp) bool {
	for _, op := range ops {
		if op.Kind != seq.PersistGC {
			return false
		}
	}
	return len(ops) > 0
}

func durabilityName(d seq.Durability) string {
	if d == seq.Fsync {
		return "fsync"
	}
	return "memory"
}

// MemWAL is a WAL in memory (tests and single-process clusters, where a
// "crash" of the replica keeps the process and so its WAL).
type MemWAL struct{ ops []seq.PersistOp }

// Append records ops, dropping what precedes a checkpoint among them.
func (w *MemWAL) Append(ops []seq.PersistOp) error {
	w.ops = append(w.ops, ops...)
	for i := len(w.ops) - 1; i >= len(w.ops)-len(ops) && i > 0; i-- {
		if w.ops[i].Kind == seq.PersistCheckpoint {
			w.ops = append(w.ops[:0:0], w.ops[i:]...)
			break
		}
	}
	return nil
}

// Load returns every op recorded.
func (w *MemWAL) Load() ([]seq.PersistOp, error) { return append([]seq.PersistOp(nil), w.ops...), nil }
