package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/anoptic/broadside/cmdlog/shard"
)

// ShardConfig configures a shard node.
type ShardConfig struct {
	Core      shard.Config
	Storage   shard.Storage
	Transport Transport
	Inbox     Inbox
	Logger    *slog.Logger
	// Observe, if set, is called after every Ready (metrics, tests).
	Observe func(*shard.Shard)
	// Health, if set, lists the shard while its store cannot write.
	Health *StorageHealth
}

// RunShard runs a shard until ctx ends or a read of its storage fails.
// Writes of all messages stepped together are applied before any
// acknowledgement is sent; a failed write (ENOSPC, EIO) is retried with
// backoff, the acknowledgements held, until it succeeds.
func RunShard(ctx context.Context, cfg ShardConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s, err := shard.New(cfg.Core, cfg.Storage)
	if err != nil {
		return err
	}
	m := s.Meta()
	log.Info("shard starting", "id", cfg.Core.ID, "epoch", m.Epoch, "stable_gp", m.StableGP, "trimmed", m.Trimmed)
	// Shards have no timers; a slow tick only bounds how long an error
	// can go unnoticed.
	return Driver[struct{}]{Inbox: cfg.Inbox, Tick: time.Second, Step: s.Step, OnTick: func() {}, Mu: new(sync.Mutex), Ready: func() error {
		rd := s.Ready()
		who := fmt.Sprintf("shard %d's store", cfg.Core.ID)
		if err := persistRetrying(ctx, log, cfg.Health, who, func() error { return applyWrites(cfg.Storage, rd.Writes) }); err != nil {
			return nil // ctx ended: stop without sending what was not stored
		}
		if err := s.Err(); err != nil {
			return err
		}
		for _, m := range rd.Messages {
			cfg.Transport.Send(m)
		}
		for _, v := range s.Violations() {
			log.Error("invariant violated", "detail", v)
		}
		if cfg.Observe != nil {
			cfg.Observe(s)
		}
		return nil
	}}.Run(ctx)
}

// applyWrites makes a round's writes durable, in order: as one batch (one
// sync) when the storage can, else one Apply each.
func applyWrites(st shard.Storage, ws []shard.Writes) error {
	if len(ws) == 0 {
		return nil
	}
	if la, ok := st.(shard.LazyApplier); ok && allLazy(ws) {
		return la.ApplyLazy(ws)
	}
	if len(ws) == 1 {
		return st.Apply(ws[0])
	}
	if ba, ok := st.(shard.BatchApplier); ok {
		return ba.ApplyAll(ws)
	}
	for _, w := range ws {
		if err := st.Apply(w); err != nil {
			return err
		}
	}
	return nil
}

func allLazy(ws []shard.Writes) bool {
	for i := range ws {
		if !ws[i].Lazy {
			return false
		}
	}
	return true
}
