package oncetest

import (
	"context"
	"sync"

	"github.com/onceq/onceq/dedup"
)

// Recorder keeps every Event an dedup.Observer sees, for tests that check
// what onceq decided: pass its Observe as a Store's, Middleware's or
// Producer's Observer. Safe for concurrent use; the zero value is ready.
type Recorder struct {
	mu     sync.Mutex
	events []dedup.Event
}

// Observe is an dedup.Observer.
func (r *Recorder) Observe(_ context.Context, e dedup.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Count is how many events had outcome (e.g. "duplicate").
func (r *Recorder) Count(outcome dedup.Decision) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Outcome == outcome {
			n++
		}
	}
	return n
}

// Events returns the events so far, oldest first.
func (r *Recorder) Events() []dedup.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]dedup.Event(nil), r.events...)
}
