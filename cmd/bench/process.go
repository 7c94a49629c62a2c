package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"
)

var errNotAll = errors.New("not all tasks processed")

// processLocal measures one in-process asynq server draining n pre-enqueued
// tasks of side, timed from Start until the handler has counted all of them.
// Each handler waits wait (0: a no-op handler).
func (b *bench) processLocal(ctx context.Context, host *workerHost, side string, conc, n int, wait time.Duration) (sample, error) {
	q := b.queue("p")
	defer b.cleanup(context.WithoutCancel(ctx), q)
	if err := b.fill(ctx, side, q, n, 0); err != nil {
		return sample{}, err
	}
	r, err := host.prepare(side, q, b.taskType, conc, int64(n))
	if err != nil {
		return sample{}, err
	}
	r.wait = wait
	runtime.GC()
	m := meter{env: b.env, trips: host.trips}
	from, err := m.mark(ctx)
	if err != nil {
		return sample{}, err
	}
	if err := r.start(); err != nil {
		return sample{}, err
	}
	select {
	case <-r.done:
	case <-time.After(b.cfg.SideTimeout):
		r.stop()
		return sample{}, fmt.Errorf("%s c=%d: %w: %d of %d in %v", side, conc, errNotAll, r.count.Load(), n, b.cfg.SideTimeout)
	case <-ctx.Done():
		r.stop()
		return sample{}, ctx.Err()
	}
	s, err := m.since(ctx, from, n)
	r.stop()
	// The last tasks' completions run after their handlers returned: read
	// the task path once the server has shut down.
	_, task := host.trips.load()
	s.TaskTrip = task - from.task
	return s, err
}

// processChildren measures worker subprocesses, each running one server of
// concurrency conc on the same queue, timed from the first start until the
// last handler returned.
func (b *bench) processChildren(ctx context.Context, kids []*child, side string, conc, n int) (sample, error) {
	q := b.queue("p")
	defer b.cleanup(context.WithoutCancel(ctx), q)
	if err := b.fill(ctx, side, q, n, 0); err != nil {
		return sample{}, err
	}
	for _, k := range kids {
		if _, err := k.call("run", side, q, b.taskType, strconv.Itoa(conc)); err != nil {
			return sample{}, err
		}
	}
	m := meter{env: b.env}
	from, err := m.mark(ctx)
	if err != nil {
		return sample{}, err
	}
	started := 0
	stopAll := func() (count, last, cpu, trips, task, allocs int64, err error) {
		for _, k := range kids[:started] {
			v, cerr := k.call("stop")
			if cerr != nil || len(v) != 6 {
				err = fmt.Errorf("stop: %v %v", v, cerr)
				continue
			}
			count, last, cpu = count+v[0], max(last, v[1]), cpu+v[2]
			trips, task, allocs = trips+v[3], task+v[4], allocs+v[5]
		}
		return
	}
	for _, k := range kids {
		if _, err := k.call("go"); err != nil {
			stopAll()
			return sample{}, err
		}
		started++
	}
	deadline := time.Now().Add(b.cfg.SideTimeout)
	var total int64
	for total < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopAll()
			return sample{}, fmt.Errorf("%s 2x c=%d: %w: %d of %d", side, conc, errNotAll, total, n)
		}
		time.Sleep(2 * time.Millisecond)
		total = 0
		for _, k := range kids {
			v, err := k.call("count")
			if err != nil || len(v) != 1 {
				stopAll()
				return sample{}, fmt.Errorf("count: %v %v", v, err)
			}
			total += v[0]
		}
	}
	count, last, cpu, trips, task, allocs, err := stopAll()
	if err != nil {
		return sample{}, err
	}
	if count < int64(n) {
		return sample{}, fmt.Errorf("%s: %w: %d of %d", side, errNotAll, count, n)
	}

	s, err := m.since(ctx, from, n)
	if err != nil {
		return sample{}, err
	}
	s.Elapsed = time.Unix(0, last).Sub(from.at)
	s.GoCPU, s.Trips, s.TaskTrip, s.Allocs = time.Duration(cpu), trips, task, uint64(allocs)
	return s, nil
}

// processing runs the end-to-end comparison: for each server layout, paired
// rounds with the side order alternating, so drift hits both sides alike.
func (b *bench) processing(ctx context.Context) ([]group, error) {
	host, err := newWorkerHost(b.env, b.cfg.warn)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	sides := []string{sideBare, sideRetained, sideOnceq}
	type layout struct {
		name    string
		servers int
		conc    int
		wait    time.Duration // the handler's; 0: no-op
	}
	var layouts []layout
	for _, c := range b.cfg.Conc {
		layouts = append(layouts, layout{fmt.Sprintf("1 server c=%d", c), 1, c, 0})
	}
	for _, c := range b.cfg.TwoConc {
		layouts = append(layouts, layout{fmt.Sprintf("2 procs c=%d each", c), 2, c, 0})
	}
	// The realistic handler beside the no-op one: what a user's task does
	// is mostly waiting on a downstream.
	if b.cfg.IOWait > 0 {
		layouts = append(layouts, layout{fmt.Sprintf("1 server c=%d, %v handler", targetConc, b.cfg.IOWait), 1, targetConc, b.cfg.IOWait})
	}
	var kids []*child
	defer func() {
		for _, k := range kids {
			k.close()
		}
	}()
	if len(b.cfg.TwoConc) > 0 {
		for i := range 2 {
			prof := ""
			if b.cfg.CPUProfile != "" {
				prof = fmt.Sprintf("%s.worker%d", b.cfg.CPUProfile, i)
			}
			k, err := startChild(b.cfg.workerCmd(), b.env.URL, prof)
			if err != nil {
				return nil, err
			}
			kids = append(kids, k)
		}
	}

	// Warm up every side in every process: scripts loaded (a fresh server
	// answers EVALSHA with NOSCRIPT once), pools dialled, code paths hot.
	warm := min(b.cfg.N, 500)
	for _, side := range sides {
		if _, err := b.processLocal(ctx, host, side, 10, warm, 0); err != nil {
			return nil, fmt.Errorf("warm-up %s: %w", side, err)
		}
		if len(kids) > 0 {
			if _, err := b.processChildren(ctx, kids, side, 10, warm); err != nil {
				return nil, fmt.Errorf("warm-up %s: %w", side, err)
			}
		}
	}

	var groups []group
	for _, l := range layouts {
		g := newGroup("process "+l.name, "tasks", sides)
		g.Servers, g.Concurrency, g.HandlerWaitMS = l.servers, l.conc, ms(l.wait)
		for r := range b.cfg.Rounds {
			for _, side := range rotate(sides, r) {
				var s sample
				if l.servers == 1 {
					s, err = b.processLocal(ctx, host, side, l.conc, b.cfg.N, l.wait)
				} else {
					s, err = b.processChildren(ctx, kids, side, l.conc, b.cfg.N)
				}
				if err != nil {
					return nil, fmt.Errorf("%s round %d %s: %w", g.Name, r+1, side, err)
				}
				g.add(side, s)
				b.logf("%-28s round %d %-9s %8.0f tasks/s  %.3f trips/task (%.3f on the task path)",
					g.Name, r+1, side, s.perSec(), float64(s.Trips)/float64(s.Ops), float64(s.TaskTrip)/float64(s.Ops))
			}
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// rotate starts the side order at r, so each side goes first in turn.
func rotate(sides []string, r int) []string {
	out := make([]string, 0, len(sides))
	for i := range sides {
		out = append(out, sides[(i+r)%len(sides)])
	}
	return out
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
