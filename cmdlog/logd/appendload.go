package logd

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Appender appends a record to a log (cmdlog.RemoteClient is one).
type Appender interface {
	Append(ctx context.Context, data []byte) error
}

// AppendLoad is the quick load test of 'broadside log append --count':
// Count records of Size bytes appended by Concurrency appenders.
type AppendLoad struct {
	Count, Concurrency, Size int
}

// Run appends the load's records to a, stopping at the first error, and
// writes the rate achieved to w.
func (l AppendLoad) Run(ctx context.Context, w io.Writer, a Appender) error {
	payload := make([]byte, l.Size)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, l.Concurrency)
	start := time.Now()
	for range l.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(l.Count) {
				if err := a.Append(ctx, payload); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("after %d appends: %w", done.Load(), err)
	}
	fmt.Fprintf(w, "appended %d records of %d bytes in %v (%.0f appends/s, %d concurrent)\n",
		done.Load(), l.Size, el.Round(time.Millisecond), float64(done.Load())/el.Seconds(), l.Concurrency)
	return nil
}
