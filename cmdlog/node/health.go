package node

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// StorageHealth collects whether a process's nodes can store: a node whose
// WAL or shard store write fails (ENOSPC, EIO) is listed until a retry
// succeeds. Readiness checks and the game server read Err; the zero value
// is ready to use, and a nil *StorageHealth ignores reports.
type StorageHealth struct {
	mu      sync.Mutex
	failing map[string]error
}

func (h *StorageHealth) set(who string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.failing, who)
		return
	}
	if h.failing == nil {
		h.failing = map[string]error{}
	}
	h.failing[who] = err
}

// Err returns nil when every node stores, else an error naming each node
// that cannot and why, e.g. "the command log cannot store (seq 2's WAL:
// ...: no space left on device)".
func (h *StorageHealth) Err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failing) == 0 {
		return nil
	}
	parts := make([]string, 0, len(h.failing))
	for who, err := range h.failing {
		parts = append(parts, who+": "+err.Error())
	}
	sort.Strings(parts)
	return fmt.Errorf("the command log cannot store (%s)", strings.Join(parts, "; "))
}

// Storage retry backoff: the first retry after minStorageRetry, doubling
// up to maxStorageRetry, so that a node resumes within about a second of
// space returning without spinning on a full disk.
const (
	minStorageRetry = 10 * time.Millisecond
	maxStorageRetry = time.Second
)

// persistRetrying runs write until it succeeds or ctx ends, with backoff.
// The node's loop stays inside it meanwhile: nothing more is stepped and,
// above all, none of the round's messages (the acknowledgements of what
// the write holds) is sent before the write succeeded. The node does not
// exit, so it resumes by itself when the disk can store again; one log
// line marks entering the state and one leaving it, and health lists the
// node meanwhile. It returns ctx's error if ctx ended first.
func persistRetrying(ctx context.Context, log *slog.Logger, health *StorageHealth, who string, write func() error) error {
	err := write()
	if err == nil {
		return nil
	}
	since := time.Now()
	log.Error("cannot store: acknowledging nothing and retrying until it can", "node", who, "err", err)
	health.set(who, err)
	backoff := minStorageRetry
	t := time.NewTimer(backoff)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err = write(); err == nil {
			health.set(who, nil)
			log.Info("storing again", "node", who, "after", time.Since(since).Round(time.Millisecond))
			return nil
		}
		health.set(who, err)
		backoff = min(2*backoff, maxStorageRetry)
		t.Reset(backoff)
	}
}
