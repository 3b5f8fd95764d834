package logbench

import (
	"context"
	"errors"
	"fmt"

	"github.com/anoptic/broadside/cmdlog/baseline/corfu"
	"github.com/anoptic/broadside/cmdlog/shardstore"
)

// corfuSystem is the Corfu-style baseline: a sequencer and a chain of 3
// Pebble-backed replicas, each on its own QUIC endpoint, and one client.
type corfuSystem struct {
	lc     *corfu.LocalCluster
	client *corfu.Client
}

func startCorfu(ctx context.Context, env Env, fsync bool) (System, error) {
	d := shardstore.NoSyncWrites
	if fsync {
		d = shardstore.SyncWrites
	}
	lc, err := corfu.StartLocal(corfu.LocalConfig{Replicas: 3, Dir: env.Dir, Durability: d, Logger: env.Logger})
	if err != nil {
		return nil, err
	}
	c, err := lc.NewClient(ctx)
	if err != nil {
		lc.Close()
		return nil, err
	}
	s := &corfuSystem{lc: lc, client: c}
	if err := waitReady(ctx, s.Append); err != nil {
		s.Close()
		return nil, fmt.Errorf("corfu: not ready: %w", err)
	}
	return s, nil
}

func (s *corfuSystem) Append(ctx context.Context, data []byte) error {
	_, err := s.client.Append(ctx, data)
	return err
}

func (s *corfuSystem) Settle(context.Context) error { return nil }

func (s *corfuSystem) Close() error {
	s.client.Close()
	return errors.Join(s.lc.Close())
}
