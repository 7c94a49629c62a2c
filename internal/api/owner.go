package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

// ownerKey holds the principal that enqueued the job k through the API.
// Every use is a command on it alone, so its slot need not be its record's.
// Owner: the API; TTL: Options.OwnerTTL; an operator's reset deletes it.
func ownerKey(k dedup.Key) string { return "onceq:{" + k.String() + "}:api-owner" }

// setOwner records who enqueued k. Job keys can be global (a payment id):
// the record lets the API show a job's state and result to that principal
// only.
func (s *server) setOwner(ctx context.Context, k dedup.Key, p string) error {
	return s.opts.Redis.Set(ctx, ownerKey(k), p, s.opts.OwnerTTL).Err()
}

// owns reports whether p enqueued k through the API. A job with no owner
// record (enqueued by the CLI, or the record expired) is no one's, unless
// p's own enqueue of it here ended with its outcome unknown: that enqueue
// may have made the job, so p takes the empty ownership (SET NX).
func (s *server) owns(ctx context.Context, k dedup.Key, p string) (bool, error) {
	s.settling.wait(ctx, k) // a job just answered 202 here may still be getting its record
	got, err := s.opts.Redis.Get(ctx, ownerKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		if !s.unsure.has(p, k) {
			return false, nil
		}
		var ok bool
		if ok, err = s.opts.Redis.SetNX(ctx, ownerKey(k), p, s.opts.OwnerTTL).Result(); err != nil || ok {
			return ok, err
		}
		got, err = s.opts.Redis.Get(ctx, ownerKey(k)).Result()
	}
	return got == p, err
}

// owner is who enqueued k through the API, "" for no one.
func (s *server) owner(ctx context.Context, k dedup.Key) (string, error) {
	got, err := s.opts.Redis.Get(ctx, ownerKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return got, err
}

// dropOwnerScript deletes an owner record that still names ARGV[1]: one
// written since (the key's next job, enqueued by another client) stays.
var dropOwnerScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// dropOwner forgets that p enqueued k, after an operator reset k: the
// owner of the reset job must not read the key's next job.
func (s *server) dropOwner(ctx context.Context, k dedup.Key, p string) error {
	if p == "" {
		return nil
	}
	return dropOwnerScript.Run(ctx, s.opts.Redis, []string{ownerKey(k)}, p).Err()
}

// unsure remembers, per process, the (principal, job key) pairs whose
// enqueue ended with its outcome unknown (a lost reply): the job may exist
// with no owner record. Bounded: past maxUnsure the oldest is forgotten,
// and its retry then sees the job as no one's.
type unsure struct {
	mu sync.Mutex
	m  map[unsureKey]time.Time
}

type unsureKey struct {
	principal string
	key       dedup.Key
}

const maxUnsure = 4096

func (u *unsure) add(p string, k dedup.Key) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[unsureKey]time.Time{}
	}
	if len(u.m) >= maxUnsure {
		var oldest unsureKey
		var at time.Time
		for uk, t := range u.m {
			if at.IsZero() || t.Before(at) {
				oldest, at = uk, t
			}
		}
		delete(u.m, oldest)
	}
	u.m[unsureKey{p, k}] = time.Now()
}

func (u *unsure) has(p string, k dedup.Key) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.m[unsureKey{p, k}]
	return ok
}

// settling holds, per process, the jobs whose owner record is still being
// written after their 202 went out, so that this process reads its own
// writes (owns). For that moment, one Redis round trip, another replica
// sees the job as no one's: a GET there is a 404, a repeat the foreign
// answer.
type settling struct {
	mu sync.Mutex
	m  map[dedup.Key]chan struct{}
}

// add marks k settling; the returned func ends it.
func (s *settling) add(k dedup.Key) func() {
	ch := make(chan struct{})
	s.mu.Lock()
	if s.m == nil {
		s.m = map[dedup.Key]chan struct{}{}
	}
	s.m[k] = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.m[k] == ch {
			delete(s.m, k)
		}
		s.mu.Unlock()
		close(ch)
	}
}

// wait returns once k is not settling, or ctx ends.
func (s *settling) wait(ctx context.Context, k dedup.Key) {
	s.mu.Lock()
	ch := s.m[k]
	s.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
