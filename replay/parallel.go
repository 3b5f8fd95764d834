package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultParallelChunk is the number of ticks RunParallel runs a runner for
// before it picks again.
const DefaultParallelChunk = 32

// RunParallel runs runners (the shards of one world, replaying a log
// offline) until each has stepped tick until or reached the end of its
// source, on at most workers goroutines (GOMAXPROCS is a good value; < 1
// means 1). Shards are independent, so any interleaving steps each to the
// same states: a worker takes the runner furthest behind that no other
// worker holds and runs it for chunk ticks (0: DefaultParallelChunk), then
// picks again. Against one goroutine per runner, when there are more
// runners than cores, the runners are not time-sliced by preemption and the
// work stays balanced to the end. It returns the runners' errors, joined;
// a runner that fails is not run again, the others run on.
func RunParallel(ctx context.Context, runners []*Runner, until uint64, workers int, chunk uint64) error {
	if chunk == 0 {
		chunk = DefaultParallelChunk
	}
	workers = max(1, min(workers, len(runners)))
	var (
		mu   sync.Mutex
		busy = make([]bool, len(runners))
		done = make([]bool, len(runners))
		errs = make([]error, len(runners))
	)
	// pick returns the idle unfinished runner with the lowest tick, or -1.
	pick := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := -1
		for i, r := range runners {
			if busy[i] || done[i] {
				continue
			}
			if k < 0 || r.Tick() < runners[k].Tick() {
				k = i
			}
		}
		if k >= 0 {
			busy[k] = true
		}
		return k
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := pick()
				if k < 0 {
					return
				}
				r := runners[k]
				from := r.Tick()
				to := min(until, from+chunk)
				err := r.RunUntil(ctx, to)
				mu.Lock()
				busy[k] = false
				switch {
				case err != nil:
					errs[k], done[k] = fmt.Errorf("shard %d: %w", r.Shard(), err), true
				case r.Tick() >= until || r.Tick() < to:
					done[k] = true // there, or its source ended
				}
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}
