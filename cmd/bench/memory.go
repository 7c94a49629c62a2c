package main

import (
	"context"
	"fmt"
)

// MemoryResult is Redis memory per retained item, from MEMORY USAGE.
type MemoryResult struct {
	Tasks   int `json:"tasks"`
	Sampled int `json:"sampled_keys"`
	// RecordBytes is one done idempotency record, onceq:{ns/id}:rec (empty result).
	RecordBytes float64 `json:"record_bytes"`
	// TaskBytes is one completed onceq task hash, asynq:{q}:t:<id>, headers included.
	TaskBytes float64 `json:"task_bytes"`
	// CompletedEntryBytes is its entry in asynq:{q}:completed (the zset divided by its size).
	CompletedEntryBytes float64 `json:"completed_entry_bytes"`
	// PlainTaskBytes is a completed asynq task with TaskID+Retention and no headers.
	PlainTaskBytes float64 `json:"plain_task_bytes"`
}

// PerJob is what one completed onceq job keeps in Redis for its windows.
func (m MemoryResult) PerJob() float64 {
	return m.RecordBytes + m.TaskBytes + m.CompletedEntryBytes
}

// memory processes n tasks with onceq (and n retained plain ones without
// middleware), then samples MEMORY USAGE of what stays behind.
func (b *bench) memory(ctx context.Context) (MemoryResult, error) {
	host, err := newWorkerHost(b.env, b.cfg.warn)
	if err != nil {
		return MemoryResult{}, err
	}
	defer host.Close()
	n := b.cfg.MemoryN
	res := MemoryResult{Tasks: n}
	step := max(n/200, 1)
	drain := func(side, q string) error {
		if err := b.fill(ctx, side, q, n); err != nil {
			return err
		}
		r, err := host.prepare(side, q, b.taskType, 50, int64(n))
		if err != nil {
			return err
		}
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
	usage := func(key string) (float64, error) {
		v, err := b.env.admin.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			return 0, fmt.Errorf("memory usage %s: %w", key, err)
		}
		return float64(v), nil
	}

	q := b.queue("m")
	defer b.cleanup(context.WithoutCancel(ctx), q)
	if err := drain(sideOnceq, q); err != nil {
		return res, err
	}
	var recSum, taskSum float64
	for i := 0; i < n; i += step {
		id, p := b.payload(q, i)
		j, err := b.catalog.Build(b.taskType, p, "", "")
		if err != nil {
			return res, err
		}
		k := j.Key
		rec, err := usage("onceq:{" + k.String() + "}:rec")
		if err != nil {
			return res, fmt.Errorf("record of %s (key layout changed?): %w", id, err)
		}
		task, err := usage("asynq:{" + q + "}:t:" + k.TaskID())
		if err != nil {
			return res, err
		}
		recSum, taskSum = recSum+rec, taskSum+task
		res.Sampled++
	}
	res.RecordBytes, res.TaskBytes = recSum/float64(res.Sampled), taskSum/float64(res.Sampled)
	z, err := usage("asynq:{" + q + "}:completed")
	if err != nil {
		return res, err
	}
	res.CompletedEntryBytes = z / float64(n)

	q2 := b.queue("m")
	defer b.cleanup(context.WithoutCancel(ctx), q2)
	if err := drain(sideRetained, q2); err != nil {
		return res, err
	}
	var plainSum float64
	for i := 0; i < n; i += step {
		id, _ := b.payload(q2, i)
		v, err := usage("asynq:{" + q2 + "}:t:" + id)
		if err != nil {
			return res, err
		}
		plainSum += v
	}
	res.PlainTaskBytes = plainSum / float64(res.Sampled)
	return res, nil
}
