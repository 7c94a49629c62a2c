package oncetest

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand, for NewStoreWithClock: time stands
// still until Advance, so a lease or a done TTL ends exactly when the test
// says. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the Clock's time; pass it to NewStoreWithClock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the Clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
