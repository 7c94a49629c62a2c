package httpidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// A request that never ran must leave nothing behind, or every retry of
// its key is refused until the claim's lease runs out. Two things can leave
// a claim behind: a Claim whose reply was lost (Redis paused or the
// connection cut: the script ran, we never learnt the token), and a clean-up
// that failed. claims remembers, per process, which claims are in the
// hands of a live request and which keys were left in doubt, so that a
// retry arriving at this process takes a claim in doubt over at once. A
// retry that reaches another replica waits for the short API lease.
type claims struct {
	mu     sync.Mutex
	live   map[storage.Hold]struct{}
	doubts map[dedup.Key]time.Time
}

// maxDoubts bounds the doubt set under a long Redis outage; past it the
// oldest entries' keys fall back to the lease.
const maxDoubts = 4096

func newClaims() *claims {
	return &claims{live: map[storage.Hold]struct{}{}, doubts: map[dedup.Key]time.Time{}}
}

func (c *claims) hold(h storage.Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[h] = struct{}{}
	delete(c.doubts, h.Key)
}

func (c *claims) drop(h storage.Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.live, h)
}

func (c *claims) doubt(k dedup.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.doubts) >= maxDoubts {
		var oldest dedup.Key
		var at time.Time
		for dk, t := range c.doubts {
			if at.IsZero() || t.Before(at) {
				oldest, at = dk, t
			}
		}
		delete(c.doubts, oldest)
	}
	c.doubts[k] = time.Now()
}

// orphaned reports whether rec is a claim no live request of this process
// holds, on a key this process left in doubt.
func (c *claims) orphaned(rec storage.Record) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, doubt := c.doubts[rec.Key]
	_, live := c.live[storage.Hold{Key: rec.Key, Token: rec.Token}]
	return doubt && !live
}

// claim is Store.Claim that first clears what a request that never ran
// left behind: an orphaned running claim (see claims), or a failed record
// (a 429 or 5xx whose clean-up did not reach Redis).
//
// The Redis client re-sends nothing (daemon.Options.NoRetries): a claim
// whose reply was lost is retried here once, as the same delivery, so it
// takes its own claim again at once instead of meeting it as another
// request's.
func (g *Guard) claim(ctx context.Context, k dedup.Key, fp string) (storage.Claim, error) {
	delivery := newDelivery()
	c, err := g.store.Claim(ctx, k, fp, g.opts.Lease, delivery)
	if err != nil && ctx.Err() == nil {
		c, err = g.store.Claim(ctx, k, fp, g.opts.Lease, delivery)
	}
	if err != nil {
		g.claims.doubt(k)
		return c, err
	}
	if c.Outcome != dedup.InProgress && c.Outcome != dedup.Conflict {
		if c.Outcome == dedup.Acquired {
			g.claims.hold(c.Hold)
		}
		return c, nil
	}
	rec, err := g.store.Status(ctx, k)
	if err != nil {
		return storage.Claim{}, err
	}
	left := rec.State == dedup.StatusFailed || (rec.State == dedup.StatusRunning && g.claims.orphaned(rec))
	if !left {
		return c, nil
	}
	g.decide(ctx, k, storage.Released, "a claim left by a request that never ran ("+string(rec.State)+")")
	if err := g.store.Forget(ctx, k); err != nil {
		return storage.Claim{}, err
	}
	c, err = g.store.Claim(ctx, k, fp, g.opts.Lease, delivery)
	if err != nil {
		g.claims.doubt(k)
		return c, err
	}
	if c.Outcome == dedup.Acquired {
		g.claims.hold(c.Hold)
	}
	return c, nil
}

// newDelivery names one request's claim: this process start and a random
// request id, unique and without '|'.
func newDelivery() string {
	var b [8]byte
	rand.Read(b[:])
	return storerule.BootOwner + "/http-" + hex.EncodeToString(b[:])
}

// unclaim ends a request that stored nothing (a 429 or 5xx): the record is
// deleted, so a retry with the same or a corrected body runs at once. The
// delete is not fenced, so it is done only while our lease surely holds;
// past that, Release (fenced) and the failed record is cleared by the next
// claim.
func (g *Guard) unclaim(ctx context.Context, h storage.Hold, claimed time.Time, cause string) {
	var err error
	if time.Since(claimed) < g.opts.Lease/2 {
		err = g.store.Forget(ctx, h.Key)
	} else {
		err = g.store.Release(ctx, h, cause)
	}
	if err != nil {
		g.claims.doubt(h.Key)
		g.opts.OnError(ctx, "releasing the idempotency claim failed", h.Key, err)
	}
}
