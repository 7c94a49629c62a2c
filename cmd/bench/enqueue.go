package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/tasks"
)

// Sides of the enqueue comparison.
const (
	enqPlain    = "asynq"        // Client.Enqueue, no options: the baseline
	enqPlainID  = "asynq+id"     // Client.Enqueue with TaskID + Retention
	enqPlainHdr = "asynq+id+hdr" // the same, with onceq's fingerprint header on the task
	enqDefault  = "default"      // Producer, unique window (TaskID, the record read in the insert)
	enqWindow   = "window"       // Producer, unique window + time-window rule
	enqRate     = "rate"         // Producer, unique window + rate rule
	dupFirst    = "first"        // Producer, a key's first insert
	dupRepeat   = "duplicate"    // Producer, the same key again: refused
)

// enqueuer is one side's client set: the round-trip hook sits on the client
// both asynq's Client and the Producer use.
type enqueuer struct {
	trips    *tripCounter
	client   *asynq.Client
	producer *dedup.Producer
	close    func()
}

func (b *bench) newEnqueuer() (*enqueuer, error) {
	trips := &tripCounter{}
	rdb := b.env.client(trips)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	// Open the pool's connections now, so no measurement pays for dialing.
	parallel(4*rdb.Options().PoolSize, rdb.Options().PoolSize, func(int) error {
		return rdb.Ping(context.Background()).Err()
	})
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &enqueuer{
		trips:    trips,
		client:   asynq.NewClientFromRedisClient(rdb),
		producer: producer,
		close:    func() { rdb.Close() },
	}, nil
}

// op is one prepared enqueue; want is the decision it must get.
type op func(ctx context.Context) error

// prepare builds n+1 enqueues of side into queue (the extra one warms the
// queue and scripts up, outside the measurement), so building tasks and
// deriving keys are not timed.
func (b *bench) prepare(e *enqueuer, side, queue string, n int) ([]op, error) {
	ops := make([]op, n+1)
	for i := range ops {
		switch side {
		case enqPlain, enqPlainID, enqPlainHdr:
			id, t := b.plainTask(queue, i, 0)
			opts := []asynq.Option{asynq.Queue(queue)}
			if side != enqPlain {
				opts = append(opts, asynq.TaskID(id), asynq.Retention(tasks.DefaultUniqueWindow))
			}
			if side == enqPlainHdr { // the task as the Producer sends it
				j, err := b.job(queue, i)
				if err != nil {
					return nil, err
				}
				h := maps.Clone(j.Task.Headers())
				maps.DeleteFunc(h, func(_, v string) bool { return v == j.Key.String() }) // the key header
				t = asynq.NewTaskWithHeaders(t.Type(), t.Payload(), h)
			}
			ops[i] = func(ctx context.Context) error {
				_, err := e.client.EnqueueContext(ctx, t, opts...)
				return err
			}
			continue
		}
		j, err := b.job(queue, i)
		if err != nil {
			return nil, err
		}
		switch side {
		case enqWindow:
			j.Rules = []*dedup.Rule{{Key: b.ruleKey("win", queue, i), Window: tasks.DefaultFileScanWindow}}
		case enqRate:
			j.Rules = []*dedup.Rule{{Key: b.ruleKey("rate", queue, i), Window: tasks.DefaultPaymentRateWindow}}
		}
		ops[i] = producerOp(e.producer, j, dedup.Enqueued)
	}
	return ops, nil
}

func producerOp(p *dedup.Producer, j dedup.Job, want dedup.Decision) op {
	return func(ctx context.Context) error {
		o, err := p.Enqueue(ctx, j)
		if err == nil && o.Decision != want {
			err = fmt.Errorf("enqueue %s: got %s (%s), want %s", j.Key, o.Decision, o.Reason, want)
		}
		return err
	}
}

// measure runs ops on g goroutines.
func (b *bench) measure(ctx context.Context, e *enqueuer, ops []op, g int) (sample, error) {
	m := meter{env: b.env, trips: e.trips}
	from, err := m.mark(ctx)
	if err != nil {
		return sample{}, err
	}
	if err := parallel(len(ops), g, func(i int) error { return ops[i](ctx) }); err != nil {
		return sample{}, err
	}
	return m.since(ctx, from, len(ops))
}

// chunkSize is how many ops one side runs before the next side's turn.
// Sides alternate in chunks within a round, so a shift in the machine's
// state (on a VM, sequential latency jumps between regimes for seconds at a
// time) hits all sides alike.
func chunkSize(g int) int {
	if g == 1 {
		return 250
	}
	return 500
}

// interleave runs every side's ops[1:] in alternating chunks after each
// side's ops[0] warmed its queue up, and returns each side's summed sample.
// sets[i] are the ops of sides[i]; a set may depend on an earlier one having
// run (a duplicate after its first insert), so chunks go in side order,
// rotated by round only when independent.
func (b *bench) interleave(ctx context.Context, e *enqueuer, sets [][]op, g, round int, rotateSides bool) ([]sample, error) {
	for _, ops := range sets {
		if err := ops[0](ctx); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	runtime.GC()
	out := make([]sample, len(sets))
	n, step := len(sets[0])-1, chunkSize(g)
	for c, lo := 0, 1; lo <= n; c, lo = c+1, lo+step {
		hi := min(lo+step, n+1)
		for k := range sets {
			i := k
			if rotateSides {
				i = (k + round + c) % len(sets)
			}
			s, err := b.measure(ctx, e, sets[i][lo:hi], g)
			if err != nil {
				return nil, err
			}
			out[i] = out[i].plus(s)
		}
	}
	return out, nil
}

// enqueueing compares plain asynq Enqueue with Producer.Enqueue under each
// policy, in paired rounds at each goroutine count.
func (b *bench) enqueueing(ctx context.Context) ([]group, error) {
	e, err := b.newEnqueuer()
	if err != nil {
		return nil, err
	}
	defer e.close()
	sides := []string{enqPlain, enqPlainID, enqPlainHdr, enqDefault, enqWindow, enqRate}
	var groups []group
	for _, g := range b.cfg.Goroutines {
		gr := newGroup(fmt.Sprintf("enqueue g=%d", g), "enqueues", sides)
		gr.Goroutines = g
		for r := range b.cfg.Rounds {
			queues := make([]string, len(sides))
			sets := make([][]op, len(sides))
			for i, side := range sides {
				queues[i] = b.queue("e")
				if sets[i], err = b.prepare(e, side, queues[i], b.cfg.EnqueueN); err != nil {
					return nil, err
				}
			}
			ss, err := b.interleave(ctx, e, sets, g, r, true)
			for _, q := range queues {
				b.cleanup(context.WithoutCancel(ctx), q)
			}
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", gr.Name, r+1, err)
			}
			for i, side := range sides {
				gr.add(side, ss[i])
			}
		}
		b.logf("%-28s %s", gr.Name, brief(gr))
		groups = append(groups, gr)
	}
	return groups, nil
}

// duplicates compares refusing a duplicate (whose state the Producer looks
// up) with inserting the key the first time, chunk by chunk: a chunk of
// first inserts, then the same keys again.
func (b *bench) duplicates(ctx context.Context) ([]group, error) {
	e, err := b.newEnqueuer()
	if err != nil {
		return nil, err
	}
	defer e.close()
	var groups []group
	for _, g := range b.cfg.DupG {
		gr := newGroup(fmt.Sprintf("duplicate describe g=%d", g), "enqueues", []string{dupFirst, dupRepeat})
		gr.Goroutines = g
		for r := range b.cfg.Rounds {
			q := b.queue("d")
			first := make([]op, b.cfg.EnqueueN+1)
			again := make([]op, b.cfg.EnqueueN+1)
			for i := range first {
				j, err := b.job(q, i)
				if err != nil {
					return nil, err
				}
				first[i] = producerOp(e.producer, j, dedup.Enqueued)
				again[i] = producerOp(e.producer, j, dedup.Duplicate)
			}
			ss, err := b.interleave(ctx, e, [][]op{first, again}, g, r, false)
			b.cleanup(context.WithoutCancel(ctx), q)
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", gr.Name, r+1, err)
			}
			gr.add(dupFirst, ss[0])
			gr.add(dupRepeat, ss[1])
		}
		b.logf("%-28s %s", gr.Name, brief(gr))
		groups = append(groups, gr)
	}
	return groups, nil
}
