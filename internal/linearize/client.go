package linearize

import (
	"context"
	"errors"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// Client is one concurrent caller of a storage.Store whose every Claim,
// Extend, Complete, Release and Status lands in a History. This file is the
// only place that maps Store calls and their results to model operations.
//
// ErrLeaseLost is a known outcome; any other error (timeout, reset
// connection, Redis restarting) is unknown: the call may have run, unless
// NotSent proves it never left the client.
type Client struct {
	ID    int
	Store storage.Store
	// Owner is the store's owner name, which InProgress reports back.
	Owner string
	// Delivery, if set, names the delivery the client's claims belong to:
	// Claim makes them as that delivery, so they are re-entrant for
	// it and the store records it as their owner (Rules.Reentrant). One
	// delivery must not claim twice at once (see storage.Store.Claim).
	Delivery string
	History  *History
	// NotSent reports errors that prove the call never reached Redis
	// (e.g. a refused dial with client retries off); such a call did not
	// happen and is left out. Nil: every error is an unknown outcome.
	NotSent func(error) bool
}

// lost records op's outcome as unknown, or drops it if it was never sent.
func (c *Client) lost(op *Op, err error) {
	if c.NotSent == nil || !c.NotSent(err) {
		op.Lost()
	}
}

// Claim calls Store.Claim.
func (c *Client) Claim(ctx context.Context, k dedup.Key, fp string, lease time.Duration) (storage.Claim, error) {
	owner := c.Owner
	if c.Delivery != "" {
		owner = c.Delivery
	}
	op := c.History.Begin(c.ID, Input{Kind: Claim, Key: k.String(), Fingerprint: fp,
		LeaseMs: lease.Milliseconds(), Owner: owner, Delivery: c.Delivery})
	cl, err := c.Store.Claim(ctx, k, fp, lease, c.Delivery)
	if err != nil {
		c.lost(op, err)
		return cl, err
	}
	out := Output{Outcome: cl.Outcome, Owner: cl.Owner, Result: string(cl.Result), Fingerprint: cl.Fingerprint}
	if cl.Outcome == dedup.Acquired {
		out.Token, out.Attempt = cl.Hold.Token, cl.Attempt
	}
	if cl.Outcome == dedup.Acquired || cl.Outcome == dedup.InProgress {
		out.LeaseUntil = cl.LeaseUntil.UnixMilli()
	}
	op.End(out)
	return cl, nil
}

// Extend calls Store.Extend for one hold.
func (c *Client) Extend(ctx context.Context, lease time.Duration, h storage.Hold) error {
	op := c.History.Begin(c.ID, Input{Kind: Extend, Key: h.Key.String(), LeaseMs: lease.Milliseconds(), Token: h.Token})
	return c.fenced(op, c.Store.Extend(ctx, lease, h)[0])
}

// Complete calls Store.Complete.
func (c *Client) Complete(ctx context.Context, h storage.Hold, result string) error {
	op := c.History.Begin(c.ID, Input{Kind: Complete, Key: h.Key.String(), Token: h.Token, Value: result})
	return c.fenced(op, c.Store.Complete(ctx, h, []byte(result), 0))
}

// Release calls Store.Release.
func (c *Client) Release(ctx context.Context, h storage.Hold, cause string) error {
	op := c.History.Begin(c.ID, Input{Kind: Release, Key: h.Key.String(), Token: h.Token, Value: cause})
	return c.fenced(op, c.Store.Release(ctx, h, cause))
}

func (c *Client) fenced(op *Op, err error) error {
	switch {
	case err == nil:
		op.End(Output{})
	case errors.Is(err, storage.ErrLeaseLost):
		op.End(Output{LeaseLost: true})
	default:
		c.lost(op, err)
	}
	return err
}

// Status calls Store.Status.
func (c *Client) Status(ctx context.Context, k dedup.Key) (storage.Record, error) {
	op := c.History.Begin(c.ID, Input{Kind: Status, Key: k.String()})
	r, err := c.Store.Status(ctx, k)
	if err != nil {
		c.lost(op, err)
		return r, err
	}
	g := Snapshot{State: r.State, Fingerprint: r.Fingerprint, Attempts: r.Attempts, Token: r.Token,
		Owner: r.Owner, Result: string(r.Result), Error: r.Error}
	if !r.LeaseUntil.IsZero() {
		g.LeaseUntil = r.LeaseUntil.UnixMilli()
	}
	op.End(Output{Record: g})
	return r, nil
}
