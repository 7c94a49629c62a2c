package api

import (
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
)

// ReplayKey is the dedup key under which the response to principal's
// request on route ("payments", "emails", "scans", "webhooks/<source>") with
// Idempotency-Key key is stored. Keys are the client's: another principal
// using the same key neither sees nor collides with this one.
func ReplayKey(principal, route, key string) dedup.Key {
	return httpidem.ReplayKey(principal+"/"+route, key)
}

// BudgetHeld is how many bytes of the webhook body budget are held now,
// all peers together.
func (h *Handler) BudgetHeld() int64 {
	b := h.s.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, held := range b.peers {
		n += held
	}
	return n
}
