package dedup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/storage"
)

// Server is an asynq server whose handlers run inside the Middleware: the
// whole wiring of a worker in one call.
//
//	srv, err := dedup.NewServer(rdb, store, asynq.Config{Concurrency: 10}, dedup.MiddlewareOptions{Catalog: catalog})
//	err = srv.Start(mux)
//	...
//	err = srv.Shutdown(ctx)
//
// On the Redis store sharing rdb, outside Redis Cluster, a Server also keeps a
// liveness key and recovers the tasks of workers whose key is gone
// (MiddlewareOptions.Liveness).
type Server struct {
	srv    *asynq.Server
	mw     *Middleware
	rdb    redis.UniversalClient
	store  *redisStore // nil: no fast recovery
	queues []string
	live   time.Duration
	stop   chan struct{}
	loops  sync.WaitGroup
	// sweep: this worker starts the successors whose key's run ended
	// (Repeat "successor"): on the Redis store on rdb, outside Cluster.
	sweep bool
	// writing is when this process's current run of successful liveness
	// writes began (Unix ns); 0 while its last write failed. A worker that
	// cannot write judges nobody: Redis refusing writes (OOM, NOREPLICAS,
	// READONLY) keeps every worker from refreshing at once.
	writing atomic.Int64
	liveErr atomic.Pointer[error] // the last write's error; nil when it worked
}

// NewServer builds a Server on rdb (the caller owns and closes it) and
// store (nil: NewRedisStore's on rdb, with the default options). cfg is
// asynq's; NewServer applies ServerConfig to it, and serves every shard of
// each queue in cfg.Queues that opts.Catalog spreads over shards
// (Spec.Shards), each shard with the queue's weight. A catalog type whose
// queue cfg.Queues does not serve is an error that names both: its jobs
// would wait forever.
func NewServer(rdb redis.UniversalClient, store storage.Store, cfg asynq.Config, opts MiddlewareOptions) (*Server, error) {
	if store == nil {
		var err error
		if store, err = NewRedisStore(rdb, storage.Options{}); err != nil {
			return nil, err
		}
	}
	verr := asynqwire.Check()
	if verr != nil && !opts.AllowUnverifiedAsynq {
		return nil, fmt.Errorf("dedup: new server: %w (MiddlewareOptions.AllowUnverifiedAsynq runs without what needs asynq's internals)", verr)
	}
	mw, err := NewMiddleware(store, opts)
	if err != nil {
		return nil, err
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]int{"default": 1} // asynq's
	}
	cfg.Queues = shardQueues(cfg.Queues, opts.Catalog)
	if err := opts.Catalog.served(cfg.Queues); err != nil {
		return nil, fmt.Errorf("dedup: new server: %w", err)
	}
	_, cluster := rdb.(*redis.ClusterClient)
	if cluster {
		cfg.Queues = withHomes(cfg.Queues)
	}
	client := rdb
	if verr == nil {
		client = joining(rdb, store, mw)
	} else {
		mw.opts.Observer(context.Background(), Event{Op: opRecover, Outcome: outcomeOff, Reason: verr.Error() +
			": no fast recoverer (asynq's recovers a killed worker's tasks in 1-2 minutes), no join (claims and completions as calls of their own)"})
	}
	s := &Server{srv: asynq.NewServerFromRedisClient(client, ServerConfig(cfg)), mw: mw, rdb: rdb,
		live: mw.opts.Liveness, stop: make(chan struct{}), queues: slices.Sorted(maps.Keys(cfg.Queues))}
	rs, ok := store.(*redisStore)
	s.sweep = ok && rs.rdb == rdb && !cluster && verr == nil
	if cluster {
		mw.opts.Observer(context.Background(), Event{Op: opSuccessor, Outcome: outcomeOff,
			Reason: "on Redis Cluster: the successor policy needs one Redis (its registry spans every key), and a producer refuses it there"})
	}
	if ok && rs.rdb == rdb && s.live > 0 && verr == nil {
		s.store = rs
	}
	return s, nil
}

// ServerConfig returns cfg with what the Middleware needs of an asynq
// server that is not a Server: IsFailure, so a task waiting on another
// worker's lease is not counted as failed, and a RetryDelayFunc that brings
// it back after that lease (cfg's own still decides for every other error).
// Call the Middleware's Shutdown after the asynq server's.
func ServerConfig(cfg asynq.Config) asynq.Config {
	cfg.IsFailure = isFailure
	cfg.RetryDelayFunc = retryDelay(cfg.RetryDelayFunc)
	return cfg
}

// Start runs h (usually an asynq.ServeMux) inside the middleware and
// starts fetching tasks. A ServeMux without a handler for a type of the
// catalog is an error naming the types: their tasks would fail as
// "handler not found" until their retries ran out. The liveness key is written first; a write that
// fails (Redis not there yet, a replica not acknowledging) is retried by
// the refresh, and other workers wait out a whole TTL of absence anyway.
func (s *Server) Start(h asynq.Handler) error {
	if mux, ok := h.(*asynq.ServeMux); ok {
		if err := s.mw.opts.Catalog.handled(mux); err != nil {
			return fmt.Errorf("dedup: start: %w", err)
		}
	}
	if s.store != nil {
		s.setLive()
		s.loops.Go(s.refresh)
		s.loops.Go(s.recoverLoop)
	}
	if s.sweep {
		s.loops.Go(s.sweepLoop)
	}
	return s.srv.Start(s.mw.Wrap(h))
}

// setLive writes this process's liveness keys, one per home, in one
// pipeline (one round trip per Cluster master); a failed write is retried
// by the next tick, and until one works this worker recovers nobody.
func (s *Server) setLive() {
	ctx, cancel := context.WithTimeout(context.Background(), s.live/3)
	_, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for h := range homes {
			pl.Set(ctx, liveKey(bootOwner, h), "1", s.live)
		}
		return nil
	})
	cancel()
	if err == nil {
		s.writing.CompareAndSwap(0, time.Now().UnixNano())
		s.liveErr.Store(nil)
		return
	}
	s.writing.Store(0)
	s.liveErr.Store(&err)
	s.mw.opts.Observer(context.Background(), Event{Op: opLiveness, Outcome: outcomeError,
		Reason: "cannot write this worker's liveness key (other workers may take it for dead): " + err.Error()})
}

// Liveness is why this process's last write of its liveness key failed;
// nil while it keeps the key (or keeps none). Readiness probes use it: a
// worker that cannot write its key may be taken for dead by the others
// once Redis takes writes again.
func (s *Server) Liveness() error {
	if err := s.liveErr.Load(); err != nil {
		return fmt.Errorf("onceq: liveness key: %w", *err)
	}
	return nil
}

// writingSince is when this process's current run of successful liveness
// writes began; false while its last write failed.
func (s *Server) writingSince() (time.Time, bool) {
	ns := s.writing.Load()
	return time.Unix(0, ns), ns != 0
}

// Shutdown stops fetching, waits up to cfg.ShutdownTimeout for handlers,
// then releases the claims of those asynq cut off, so their next delivery
// claims at once; ctx bounds the release. The liveness key goes last, so a
// drained worker never looks like a crashed one.
func (s *Server) Shutdown(ctx context.Context) error {
	s.srv.Shutdown()
	err := s.mw.Shutdown(ctx)
	close(s.stop)
	s.loops.Wait()
	if s.store != nil {
		_, derr := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for h := range homes {
				pl.Del(ctx, liveKey(bootOwner, h))
			}
			return nil
		})
		err = errors.Join(err, derr)
	}
	return err
}

// refresh keeps this process's liveness key alive.
func (s *Server) refresh() {
	tick := time.NewTicker(s.live / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.setLive()
	}
}

// recoverLoop hands back the tasks of dead workers, every third of the
// liveness TTL. Every worker runs it; each step is atomic and does nothing
// once another worker did it. A claim counts as orphaned only once its
// owner's key has been missing for a whole TTL while that claim was held:
// a failover to a replica that never got the key, one failed refresh, or a
// Redis restart that outlasted the key never looks like a crash, and a
// claim the owner took since is not judged by its older absence.
func (s *Server) recoverLoop() {
	tick := time.NewTicker(s.live / 3)
	defer tick.Stop()
	gone := map[string]time.Time{} // claim holder -> first seen without its owner's key
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if err := s.recoverOnce(gone, time.Now); errors.Is(err, errCrossSlot) {
			s.mw.opts.Observer(context.Background(), Event{Op: opRecover, Outcome: outcomeOff,
				Reason: err.Error() + ": asynq's own recoverer takes over (1-2 minutes)"})
			return
		}
	}
}

// recoverOnce is one look at every queue; gone remembers since when each
// held claim's owner has been missing. A sighting is dated after its read
// and compared from before the next one, so a read that hung through a
// Redis outage never stretches the absence it saw. Only time this process
// could write counts: an owner is gone once its key has been missing for a
// whole TTL during which this process wrote its own, so a live owner that
// could not write while this one could not either is never judged.
func (s *Server) recoverOnce(gone map[string]time.Time, now func() time.Time) error {
	since, writing := s.writingSince()
	if !writing {
		clear(gone) // what it saw while it could not write proves nothing
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.live)
	defer cancel()
	seen := map[string]bool{}
	defer func() {
		for h := range gone {
			if !seen[h] {
				delete(gone, h)
			}
		}
	}()
	for _, q := range s.queues {
		before := now()
		orphans, err := findOrphans(ctx, s.rdb, q, since)
		if err != nil {
			continue // Redis trouble: the next tick tries again
		}
		after := now()
		for _, o := range orphans {
			if o.holder != "" && !o.lapsed { // a lapsed claim was timed by Redis's clocks
				seen[o.holder] = true
				first, ok := gone[o.holder]
				if !ok {
					gone[o.holder] = after
				}
				if since.After(first) {
					first = since
				}
				if !ok || before.Sub(first) < s.live {
					continue
				}
			}
			how, err := recoverOrphan(ctx, s.rdb, o, s.store.opts.FailedTTL)
			if err != nil {
				if errors.Is(err, errCrossSlot) {
					return err
				}
				continue
			}
			if how == "" {
				continue // another worker was first, or the owner lives after all
			}
			cause, why := outcomeOrphaned, "worker "+o.owner+" is gone"
			switch {
			case o.holder == "":
				cause, why = outcomeLeaseExpired, "asynq's lease ran out with no claim held"
			case o.lapsed:
				cause, why = outcomeLeaseExpired, "the claim's lease and asynq's ran out: no handler holds it"
			}
			s.mw.opts.Observer(ctx, Event{Op: opRecover, Key: o.key, Outcome: cause, Reason: why + ": task " + how})
		}
	}
	return nil
}
