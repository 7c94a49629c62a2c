package api

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// ownerKey holds the principal that enqueued the job k through the API. It
// shares the hash tag of k's dedup record, so both sit in one cluster slot.
// Owner: the API; TTL: Options.OwnerTTL.
func ownerKey(k onceq.Key) string { return "onceq:{" + k.String() + "}:api-owner" }

// setOwner records who enqueued k. Job keys can be global (a payment id):
// the record lets the API show a job's state and result to that principal
// only.
func (s *server) setOwner(ctx context.Context, k onceq.Key, p string) error {
	return s.opts.Redis.Set(ctx, ownerKey(k), p, s.opts.OwnerTTL).Err()
}

// owns reports whether p enqueued k through the API. A job with no owner
// record (enqueued by the CLI, or the record expired) is no one's.
func (s *server) owns(ctx context.Context, k onceq.Key, p string) (bool, error) {
	got, err := s.opts.Redis.Get(ctx, ownerKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return got == p, err
}
