package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/tasks"
)

// The end-to-end comparison (issue 24): jobs of which every fifth repeats
// an earlier one, enqueued while the workers run.
const (
	e2eGroupName   = "e2e 20% repeats c=10"
	e2eRepeatEvery = 5  // one job in 5 is a repeat: 20 %
	e2eConc        = 10 // the server's concurrency and the producers' goroutines
)

// e2ePlan is the order of n jobs as item numbers: a repeat names an
// earlier unique item, picked at random (the same plan every run).
func e2ePlan(n int) (items []int, unique int) {
	rng := rand.New(rand.NewPCG(24, 24))
	items = make([]int, n)
	for k := range items {
		if k%e2eRepeatEvery == e2eRepeatEvery-1 && unique > 0 {
			items[k] = rng.IntN(unique)
			continue
		}
		items[k] = unique
		unique++
	}
	return items, unique
}

// e2eProducer is the enqueuing side of the end-to-end run: its own pool,
// counted by the worker host's trip counter, as one process that both
// enqueues and works.
type e2eProducer struct {
	rdb      *redis.Client
	client   *asynq.Client
	producer *dedup.Producer
}

func newE2EProducer(env *redisEnv, host *workerHost) (*e2eProducer, error) {
	rdb := env.client(host.trips)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	parallel(4*e2eConc, e2eConc, func(int) error { return rdb.Ping(context.Background()).Err() })
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &e2eProducer{rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), producer: producer}, nil
}

// ops builds the enqueues of side for the plan into queue; refused counts
// the repeats the side turned away. Bare asynq cannot tell a repeat: it
// enqueues it as a new task.
func (b *bench) e2eOps(p *e2eProducer, side, queue string, items []int, refused *atomic.Int64) ([]op, error) {
	ops := make([]op, len(items))
	for k, i := range items {
		switch side {
		case sideBare, sideRetained:
			id, t := b.plainTask(queue, i, 0)
			opts := []asynq.Option{asynq.Queue(queue)}
			if side == sideRetained {
				opts = append(opts, asynq.TaskID(id), asynq.Retention(tasks.DefaultUniqueWindow))
			}
			ops[k] = func(ctx context.Context) error {
				_, err := p.client.EnqueueContext(ctx, t, opts...)
				if errors.Is(err, asynq.ErrTaskIDConflict) {
					refused.Add(1)
					return nil
				}
				return err
			}
		default:
			j, err := b.job(queue, i)
			if err != nil {
				return nil, err
			}
			ops[k] = func(ctx context.Context) error {
				o, err := p.producer.Enqueue(ctx, j)
				switch {
				case err != nil:
					return err
				case o.Decision == dedup.Duplicate:
					refused.Add(1)
				case o.Decision != dedup.Enqueued:
					return fmt.Errorf("enqueue %s: %s (%s)", j.Key, o.Decision, o.Reason)
				}
				return nil
			}
		}
	}
	return ops, nil
}

// endToEnd measures n jobs of side from the first enqueue until the last
// task to run has run: every task for bare asynq, the unique ones for the
// sides that refuse repeats. Ops are jobs offered, repeats included.
// Each handler waits wait (0: a no-op handler).
func (b *bench) endToEnd(ctx context.Context, host *workerHost, p *e2eProducer, side string, n int, wait time.Duration) (sample, error) {
	q := b.queue("x")
	defer b.cleanup(context.WithoutCancel(ctx), q)
	items, unique := e2ePlan(n)
	var refused atomic.Int64
	ops, err := b.e2eOps(p, side, q, items, &refused)
	if err != nil {
		return sample{}, err
	}
	want := int64(unique)
	if side == sideBare {
		want = int64(n)
	}
	r, err := host.prepare(side, q, b.taskType, e2eConc, want)
	if err != nil {
		return sample{}, err
	}
	r.wait = wait
	if err := r.start(); err != nil {
		return sample{}, err
	}
	defer r.stop()
	runtime.GC()
	m := meter{env: b.env, trips: host.trips}
	from, err := m.mark(ctx)
	if err != nil {
		return sample{}, err
	}
	if err := parallel(n, e2eConc, func(i int) error { return ops[i](ctx) }); err != nil {
		return sample{}, err
	}
	select {
	case <-r.done:
	case <-time.After(b.cfg.SideTimeout):
		return sample{}, fmt.Errorf("%s e2e: %w: %d of %d in %v", side, errNotAll, r.count.Load(), want, b.cfg.SideTimeout)
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	s, err := m.since(ctx, from, n)
	if err != nil {
		return sample{}, err
	}
	r.stop()
	_, task := host.trips.load()
	s.TaskTrip = task - from.task
	s.Elapsed = time.Unix(0, r.last.Load()).Sub(from.at)
	if side != sideBare && refused.Load() != int64(n-unique) {
		return sample{}, fmt.Errorf("%s e2e: %d repeats refused, want %d", side, refused.Load(), n-unique)
	}
	return s, nil
}

// endToEnds runs the end-to-end comparison in paired rounds.
func (b *bench) endToEnds(ctx context.Context) ([]group, error) {
	host, err := newWorkerHost(b.env, b.cfg.warn)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	p, err := newE2EProducer(b.env, host)
	if err != nil {
		return nil, err
	}
	defer p.rdb.Close()
	sides := []string{sideBare, sideRetained, sideOnceq}
	for _, side := range sides {
		if _, err := b.endToEnd(ctx, host, p, side, min(b.cfg.N, 500), 0); err != nil {
			return nil, fmt.Errorf("warm-up %s: %w", side, err)
		}
	}
	waits := []time.Duration{0}
	if b.cfg.IOWait > 0 {
		waits = append(waits, b.cfg.IOWait)
	}
	var groups []group
	for _, wait := range waits {
		g := newGroup(e2eName(wait), "jobs", sides)
		g.Servers, g.Concurrency, g.HandlerWaitMS = 1, e2eConc, ms(wait)
		for r := range b.cfg.Rounds {
			for _, side := range rotate(sides, r) {
				s, err := b.endToEnd(ctx, host, p, side, b.cfg.N, wait)
				if err != nil {
					return nil, fmt.Errorf("%s round %d %s: %w", g.Name, r+1, side, err)
				}
				g.add(side, s)
				b.logf("%-28s round %d %-9s %8.0f jobs/s  %.0f us CPU/job", g.Name, r+1, side, s.perSec(), s.goUS()+s.redisUS())
			}
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// e2eName is the end-to-end group's name with a handler waiting wait
// (0: the no-op handler, e2eGroupName).
func e2eName(wait time.Duration) string {
	if wait == 0 {
		return e2eGroupName
	}
	return fmt.Sprintf("%s, %v handler", e2eGroupName, wait)
}
