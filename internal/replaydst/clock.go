package replaydst

import (
	"sync"
	"time"
)

// manualClock is the simulation's replay.Clock: time moves only when the
// simulator advances it, and the timers due on the way fire one at a time,
// earliest first and then in the order they were set, each followed by a
// settle (synctest.Wait), so that what a timer wakes runs alone.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	waiters []*waiter
}

type waiter struct {
	at  time.Time
	seq uint64
	ch  chan time.Time
}

// epoch is the simulated time at tick 0.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newManualClock() *manualClock { return &manualClock{now: epoch} }

// Now implements replay.Clock.
func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After implements replay.Clock. A timer whose receiver stopped waiting
// fires into its buffer and is forgotten.
func (c *manualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.seq++
	c.waiters = append(c.waiters, &waiter{at: c.now.Add(d), seq: c.seq, ch: ch})
	return ch
}

// advance moves the clock forward by d, firing the timers due on the way.
func (c *manualClock) advance(d time.Duration, settle func()) {
	end := c.Now().Add(d)
	for {
		c.mu.Lock()
		best := -1
		for i, w := range c.waiters {
			if w.at.After(end) {
				continue
			}
			if best < 0 || w.at.Before(c.waiters[best].at) || (w.at.Equal(c.waiters[best].at) && w.seq < c.waiters[best].seq) {
				best = i
			}
		}
		if best < 0 {
			c.now = end
			c.mu.Unlock()
			return
		}
		w := c.waiters[best]
		c.waiters = append(c.waiters[:best], c.waiters[best+1:]...)
		if w.at.After(c.now) {
			c.now = w.at
		}
		c.mu.Unlock()
		w.ch <- w.at
		settle()
	}
}
