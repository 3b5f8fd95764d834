package world

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// StoringCheck is whether the command log can store, for /readyz and the
// game server (which refuses commands busy meanwhile); Set once the log is
// open, nil before (and for an external log). Its zero value is ready.
type StoringCheck struct{ f atomic.Pointer[func() error] }

// Set installs the check.
func (c *StoringCheck) Set(f func() error) {
	if f != nil {
		c.f.Store(&f)
	}
}

// Err returns why the log cannot store (nil: it can).
func (c *StoringCheck) Err() error {
	if f := c.f.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// Watch logs one line when the log stops being able to store and one when
// it can again (the nodes log each failure of their own at their level).
func (c *StoringCheck) Watch(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch err := c.Err(); {
		case err != nil && since.IsZero():
			since = time.Now()
			log.Error("refusing commands busy: "+err.Error(), "readyz", "not ready")
		case err == nil && !since.IsZero():
			log.Info("the command log stores again: accepting commands", "after", time.Since(since).Round(time.Millisecond))
			since = time.Time{}
		}
	}
}
