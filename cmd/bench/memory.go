package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
)

// What a remembered job holds in the memory sample (issue 24: a 200-byte
// payload, with the result kept).
const (
	memPayloadBytes = 200
	memResult       = `{"status":"sent","message_id":"m-0123456789abcdef"}`
)

// MemoryResult is Redis memory per remembered job, from MEMORY USAGE of
// every key the sample's jobs left behind.
type MemoryResult struct {
	Tasks        int `json:"tasks"`
	Sampled      int `json:"sampled_keys"`
	PayloadBytes int `json:"payload_bytes"`
	ResultBytes  int `json:"result_bytes"`
	// RecordBytes is onceq's keys of the run (the done records, result
	// included, and whatever else onceq keeps per job), per job.
	RecordBytes float64 `json:"record_bytes"`
	// TaskBytes is one completed onceq task hash, asynq:{q}:t:<id>, headers included.
	TaskBytes float64 `json:"task_bytes"`
	// CompletedEntryBytes is its entry in asynq:{q}:completed (the zset divided by its size).
	CompletedEntryBytes float64 `json:"completed_entry_bytes"`
	// Shown* are the same for the type with its completed tasks kept for
	// the dashboard (Spec.WriteResult, as cmd/worker's types): record,
	// task and completed entry per job.
	ShownRecordBytes float64 `json:"shown_record_bytes"`
	ShownTaskBytes   float64 `json:"shown_task_bytes"`
	ShownEntryBytes  float64 `json:"shown_completed_entry_bytes"`
	// PlainTaskBytes is a completed asynq task with TaskID+Retention and no
	// headers, and PlainEntryBytes its completed-zset entry: asynq+id's cost.
	PlainTaskBytes  float64 `json:"plain_task_bytes"`
	PlainEntryBytes float64 `json:"plain_completed_entry_bytes"`
	Load            float64 `json:"load_avg_1m"`
}

// PerJob is what one completed onceq job keeps in Redis for its windows.
func (m MemoryResult) PerJob() float64 {
	return m.RecordBytes + m.TaskBytes + m.CompletedEntryBytes
}

// ShownPerJob is PerJob for a type shown on the dashboard.
func (m MemoryResult) ShownPerJob() float64 {
	return m.ShownRecordBytes + m.ShownTaskBytes + m.ShownEntryBytes
}

// memory processes n jobs of 200-byte payloads with onceq, their handler
// returning a result, then as many of a type shown on the dashboard, and n
// TaskID+Retention tasks without middleware, and sums MEMORY USAGE of what
// each leaves behind.
func (b *bench) memory(ctx context.Context) (MemoryResult, error) {
	host, err := newWorkerHost(b.env, b.cfg.warn)
	if err != nil {
		return MemoryResult{}, err
	}
	defer host.Close()
	n := b.cfg.MemoryN
	res := MemoryResult{Tasks: n, PayloadBytes: memPayloadBytes, ResultBytes: len(memResult)}
	drain := func(side, q string) error {
		if err := b.fill(ctx, side, q, n, memPayloadBytes); err != nil {
			return err
		}
		r, err := host.prepare(side, q, b.taskType, 50, int64(n))
		if err != nil {
			return err
		}
		r.result = []byte(memResult)
		if err := r.start(); err != nil {
			return err
		}
		defer r.stop()
		select {
		case <-r.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// onceq, then onceq shown on the dashboard: each side's keys measured
	// and deleted before the next.
	for _, side := range []string{sideOnceq, sideShown} {
		q := b.queue("m")
		if err := drain(side, q); err != nil {
			return res, err
		}
		if err := b.resultKept(ctx, q); err != nil {
			return res, err
		}
		rec, k1, err := b.usage(ctx, b.onceqKeys())
		if err != nil {
			return res, err
		}
		// The compact marks written beside the records are measured at
		// scale (remembered): a few thousand keys spread them one a hash.
		marks, _, err := b.usage(ctx, "onceq:{*}:mark:*bench-"+b.run+"*")
		if err != nil {
			return res, err
		}
		rec -= marks
		tasks, entries, k2, err := b.queueUsage(ctx, q)
		if err != nil {
			return res, err
		}
		if rec == 0 {
			return res, fmt.Errorf("no onceq key matches %s (key layout changed?)", b.onceqKeys())
		}
		if side == sideOnceq {
			res.RecordBytes, res.TaskBytes, res.CompletedEntryBytes = rec/float64(n), tasks/float64(n), entries/float64(n)
		} else {
			res.ShownRecordBytes, res.ShownTaskBytes, res.ShownEntryBytes = rec/float64(n), tasks/float64(n), entries/float64(n)
		}
		res.Sampled += k1 + k2
		if err := b.cleanup(context.WithoutCancel(ctx), q); err != nil {
			return res, err
		}
	}

	q2 := b.queue("m")
	defer b.cleanup(context.WithoutCancel(ctx), q2)
	if err := drain(sideRetained, q2); err != nil {
		return res, err
	}
	tasks, entries, k3, err := b.queueUsage(ctx, q2)
	if err != nil {
		return res, err
	}
	res.PlainTaskBytes, res.PlainEntryBytes = tasks/float64(n), entries/float64(n)
	res.Sampled += k3
	res.Load = loadAvg()
	return res, nil
}

// resultKept checks that the sample measured what the target is about: a
// repeat of the first job is refused with the handler's result.
func (b *bench) resultKept(ctx context.Context, q string) error {
	store, err := dedup.NewRedisStore(b.env.admin, storage.Options{})
	if err != nil {
		return err
	}
	j, err := b.jobSized(q, 0, memPayloadBytes)
	if err != nil {
		return err
	}
	if len(j.Task.Payload()) != memPayloadBytes {
		return fmt.Errorf("payload of %d B, want %d", len(j.Task.Payload()), memPayloadBytes)
	}
	p, err := dedup.NewProducer(b.env.admin, store, dedup.ProducerOptions{})
	if err != nil {
		return err
	}
	o, err := p.Enqueue(ctx, j)
	if err != nil {
		return err
	}
	if o.Decision != dedup.Duplicate || !bytes.Equal(o.Result, []byte(memResult)) {
		return fmt.Errorf("repeat of a remembered job: %s with result %q, want a duplicate with %q", o.Decision, o.Result, memResult)
	}
	return nil
}

// queueUsage is the memory of queue's task hashes and of its completed zset
// (asynq:{q...}: a sharded queue's shards too); per-queue counters are not
// per job and left out.
func (b *bench) queueUsage(ctx context.Context, queue string) (tasks, completed float64, keys int, err error) {
	if tasks, keys, err = b.usage(ctx, "asynq:{"+queue+"*}:t:*"); err != nil {
		return 0, 0, 0, err
	}
	completed, k, err := b.usage(ctx, "asynq:{"+queue+"*}:completed")
	return tasks, completed, keys + k, err
}

// usage sums MEMORY USAGE (every element counted) over the keys matching
// pattern.
func (b *bench) usage(ctx context.Context, pattern string) (float64, int, error) {
	var keys []string
	iter := b.env.admin.Scan(ctx, 0, pattern, 2000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, 0, err
	}
	var sum float64
	for lo := 0; lo < len(keys); lo += 500 {
		pipe := b.env.admin.Pipeline()
		for _, k := range keys[lo:min(lo+500, len(keys))] {
			pipe.MemoryUsage(ctx, k, 0)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("memory usage %s: %w", strings.TrimSuffix(pattern, "*"), err)
		}
		for _, c := range cmds {
			sum += float64(c.(interface{ Val() int64 }).Val())
		}
	}
	return sum, len(keys), nil
}
