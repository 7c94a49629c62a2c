package linearize

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// TestBrokenStoresAreCaught runs deliberately broken stores through the
// same harness and requires the checker to call them non-linearizable, with
// a readable minimal history and the HTML view written.
func TestBrokenStoresAreCaught(t *testing.T) {
	r := newRig(t)
	for n, tc := range []struct {
		name   string
		broken brokenStore
	}{
		{"claim read then written", brokenStore{splitClaim: true}},
		{"complete without the token check", brokenStore{noFence: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(rdb redis.UniversalClient, owner string) (storage.Store, error) {
				b := tc.broken
				b.rdb, b.owner = rdb, owner
				return &b, nil
			}
			const tries = 5 // a race per history is all but certain; a miss means a dull harness
			for i := range tries {
				seed := uint64(time.Now().UnixNano())
				name := fmt.Sprintf("broken%d-%d", n, i)
				res := Check(Rules{}, r.history(t, name, mk, Rules{}, *historyLen, false, seed).Operations(), time.Minute)
				switch res.Verdict {
				case porcupine.Ok:
					t.Logf("history %d (seed %d) passed; trying another", i, seed)
					continue
				case porcupine.Unknown:
					t.Fatalf("history %d (seed %d): checker timed out", i, seed)
				}
				t.Logf("caught in history %d (seed %d):\n%s", i, seed, res.Report())
				// Short next to the history, not under a fixed count: a stale
				// holder's late complete keeps every claim and release the
				// others made on its key meanwhile (mutations, which the
				// minimizer keeps), and a slower run (the race detector)
				// makes more of them.
				if len(res.Minimal) == 0 || len(res.Minimal)*10 > res.Ops {
					t.Errorf("minimal history has %d of %d operations; want a short one", len(res.Minimal), res.Ops)
				}
				paths, err := res.WriteHTML(artifactDir(t, false), name)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range paths {
					if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
						t.Errorf("HTML view %s: %v", p, err)
					}
				}
				t.Logf("HTML views: %v", paths)
				return
			}
			t.Fatalf("the broken store passed %d histories", tries)
		})
	}
}

// brokenStore is a storage.Store with one deliberate flaw, on plain Redis
// commands and a hash record: splitClaim reads the record
// and writes its claim in a second round trip, so two clients can both
// acquire; noFence completes a running record whatever the caller's token.
// Everything else is done atomically (WATCH/MULTI), so only the flaw shows.
type brokenStore struct {
	rdb                 redis.UniversalClient
	owner               string
	splitClaim, noFence bool
}

var _ storage.Store = (*brokenStore)(nil)

var errNotModelled = errors.New("broken store: not part of the record model")

func (s *brokenStore) key(k dedup.Key) string { return "broken:{" + k.String() + "}" }

// write is what an operation decided to store.
type write struct {
	set map[string]any
	del []string
	ttl time.Duration
}

type pipelined interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// update reads the record and Redis's clock, lets decide choose a write,
// and makes it: under WATCH when atomic, else in a second round trip.
func (s *brokenStore) update(ctx context.Context, key string, atomic bool, decide func(time.Time, map[string]string) *write) error {
	read := func(c pipelined) (time.Time, map[string]string, error) {
		var tm *redis.TimeCmd
		var all *redis.MapStringStringCmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			tm, all = p.Time(ctx), p.HGetAll(ctx, key)
			return nil
		})
		return tm.Val(), all.Val(), err
	}
	apply := func(p redis.Pipeliner, w *write) error {
		p.HSet(ctx, key, w.set)
		if len(w.del) > 0 {
			p.HDel(ctx, key, w.del...)
		}
		p.PExpire(ctx, key, w.ttl)
		return nil
	}
	if !atomic {
		now, m, err := read(s.rdb)
		if err != nil {
			return err
		}
		if w := decide(now, m); w != nil {
			_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return apply(p, w) })
		}
		return err
	}
	for {
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			now, m, err := read(tx)
			if err != nil {
				return err
			}
			if w := decide(now, m); w != nil {
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error { return apply(p, w) })
			}
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
}

func num(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func (s *brokenStore) Claim(ctx context.Context, k dedup.Key, fp string, lease time.Duration, delivery string) (storage.Claim, error) {
	var c storage.Claim
	err := s.update(ctx, s.key(k), !s.splitClaim, func(now time.Time, m map[string]string) *write {
		if st := m["st"]; st != "" {
			switch {
			case st == "done" && fp != "" && m["fp"] != "" && m["fp"] != fp:
				c = storage.Claim{Outcome: dedup.Conflict, Fingerprint: m["fp"]}
				return nil
			case st == "done":
				c = storage.Claim{Outcome: dedup.Duplicate, Result: []byte(m["res"])}
				return nil
			case st == "running" && num(m["lu"]) > now.UnixMilli():
				c = storage.Claim{Outcome: dedup.InProgress, LeaseUntil: time.UnixMilli(num(m["lu"])), Owner: m["own"]}
				return nil
			}
		}
		tok := max(num(m["tok"])+1, now.UnixMicro())
		lu := now.UnixMilli() + lease.Milliseconds()
		att := num(m["att"]) + 1
		set := map[string]any{"st": "running", "tok": tok, "lu": lu, "own": s.owner, "att": att}
		if m["st"] == "" || fp != "" {
			set["fp"] = fp
		}
		c = storage.Claim{Outcome: dedup.Acquired, Hold: storage.Hold{Key: k, Token: tok}, Attempt: int(att), LeaseUntil: time.UnixMilli(lu)}
		// A running record keeps no cause, as dedup's packed record.
		return &write{set: set, del: []string{"err"}, ttl: lease + time.Hour}
	})
	return c, err
}

// fenced writes w for a running record held under h's token (any token
// with checkToken false).
func (s *brokenStore) fenced(ctx context.Context, h storage.Hold, checkToken bool, w func(now time.Time) write) error {
	lost := false
	err := s.update(ctx, s.key(h.Key), true, func(now time.Time, m map[string]string) *write {
		lost = m["st"] != "running" || (checkToken && num(m["tok"]) != h.Token)
		if lost {
			return nil
		}
		wr := w(now)
		return &wr
	})
	if err == nil && lost {
		err = storage.ErrLeaseLost
	}
	return err
}

func (s *brokenStore) Extend(ctx context.Context, lease time.Duration, holds ...storage.Hold) []error {
	errs := make([]error, len(holds))
	for i, h := range holds {
		errs[i] = s.fenced(ctx, h, true, func(now time.Time) write {
			return write{set: map[string]any{"lu": now.UnixMilli() + lease.Milliseconds()}, ttl: lease + time.Hour}
		})
	}
	return errs
}

func (s *brokenStore) Complete(ctx context.Context, h storage.Hold, result []byte, _ time.Duration) error {
	return s.fenced(ctx, h, !s.noFence, func(time.Time) write {
		return write{set: map[string]any{"st": "done", "res": result}, del: []string{"lu", "err"}, ttl: 24 * time.Hour}
	})
}

func (s *brokenStore) Release(ctx context.Context, h storage.Hold, cause string) error {
	return s.fenced(ctx, h, true, func(time.Time) write {
		return write{set: map[string]any{"st": "failed", "err": cause}, del: []string{"lu"}, ttl: time.Hour}
	})
}

func (s *brokenStore) Status(ctx context.Context, k dedup.Key) (storage.Record, error) {
	m, err := s.rdb.HGetAll(ctx, s.key(k)).Result()
	if err != nil {
		return storage.Record{}, err
	}
	r := storage.Record{Key: k, State: dedup.StatusUnknown}
	if len(m) == 0 {
		return r, nil
	}
	r.State, r.Fingerprint, r.Owner, r.Error = dedup.Status(m["st"]), m["fp"], m["own"], m["err"]
	r.Attempts, r.Token = int(num(m["att"])), num(m["tok"])
	if res, ok := m["res"]; ok {
		r.Result = []byte(res)
	}
	if lu := num(m["lu"]); lu > 0 {
		r.LeaseUntil = time.UnixMilli(lu)
	}
	return r, nil
}

func (s *brokenStore) Forget(context.Context, dedup.Key) error { return errNotModelled }

func (s *brokenStore) Reserve(context.Context, dedup.Key, time.Duration, string) (storage.Reservation, error) {
	return storage.Reservation{}, errNotModelled
}

func (s *brokenStore) Unreserve(context.Context, dedup.Key, string) error { return errNotModelled }
