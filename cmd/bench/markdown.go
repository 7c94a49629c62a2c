package main

import (
	"fmt"
	"io"
	"strings"
)

// markdown writes docs/performance.md's tables from a report, so the
// page is regenerated, never retyped:
//
//	go run ./cmd/bench -json bench.json -markdown bench.md
//	go run ./cmd/bench -from bench.json -markdown -     # again from the saved run
func (r *Report) markdown(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "`%s`: %s, %d CPUs, %s, Redis %s, %d paired rounds of N = %d, load average %s.\n\n",
		r.Command, r.Platform, r.CPUs, r.Go, r.Redis, s.Rounds, s.N, r.Load)
	if r.Network != "" {
		fmt.Fprintf(w, "Network: %s.\n\n", r.Network)
	}
	fmt.Fprintln(w, "| measure | bare asynq | onceq | onceq / asynq: median (IQR) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	ratio := func(g, test, base string) string {
		c, ok := r.comparison(g, test, base)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%.2f (%.2f–%.2f)", c.Median, c.Q1, c.Q3)
	}
	for g := range r.groupsNamed("process ") {
		b, _ := g.result(sideBare)
		o, _ := g.result(sideOnceq)
		c, _ := r.comparison(g.Name, sideOnceq, sideBare)
		name := strings.TrimPrefix(g.Name, "process ")
		fmt.Fprintf(w, "| processing, %s (tasks/s) | %s | %s | %s |\n", name, thousands(b.OpsPerSec), thousands(o.OpsPerSec), ratio(g.Name, sideOnceq, sideBare))
		fmt.Fprintf(w, "| CPU per task, %s: Go + Redis (µs) | %.0f + %.0f | %.0f + %.0f | +%.0f + %.0f |\n", name,
			b.GoCPUus, b.RedisCPUus, o.GoCPUus, o.RedisCPUus, c.AddedGoUS, c.AddedRedisUS)
		fmt.Fprintf(w, "| round trips per task (task path), allocations per task, %s | %.2f, %.0f | %.2f, %.0f | |\n", name,
			b.TaskPathTripsPerOp, b.AllocsPerOp, o.TaskPathTripsPerOp, o.AllocsPerOp)
	}
	for g := range r.groupsNamed("e2e") {
		b, _ := g.result(sideBare)
		o, _ := g.result(sideOnceq)
		handler := ""
		if g.HandlerWaitMS > 0 {
			handler = fmt.Sprintf(", %g ms handler", g.HandlerWaitMS)
		}
		fmt.Fprintf(w, "| end to end, 20 %% repeats, c=10%s (jobs/s; CPU per job, Go + Redis, µs) | %s; %.0f | %s; %.0f | %s |\n",
			handler, thousands(b.OpsPerSec), b.GoCPUus+b.RedisCPUus, thousands(o.OpsPerSec), o.GoCPUus+o.RedisCPUus, ratio(g.Name, sideOnceq, sideBare))
	}
	for g := range r.groupsNamed("enqueue") {
		p, _ := g.result(enqPlain)
		d, _ := g.result(enqDefault)
		fmt.Fprintf(w, "| enqueue, default policy, g=%d (enqueues/s) | %s | %s | %s |\n", g.Goroutines,
			thousands(p.OpsPerSec), thousands(d.OpsPerSec), ratio(g.Name, enqDefault, enqPlain))
	}
	for g := range r.groupsNamed("duplicate") {
		f, _ := g.result(dupFirst)
		d, _ := g.result(dupRepeat)
		fmt.Fprintf(w, "| %s: first insert vs rejected duplicate (µs per op; cost ratio) | %.0f | %.0f | %s |\n",
			g.Name, f.USPerOp, d.USPerOp, ratio(g.Name, dupRepeat, dupFirst))
	}
	if len(r.Join) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The worker's join: a Server (claim and completion ride asynq's dequeue and acknowledgement) against asynq's server with the Middleware (calls of their own):")
		printJoins(w, r.Join)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "| Redis memory per remembered job, %d B payload, result kept (B; asynq+id for bare) | %.0f | %.0f | |\n",
			m.PayloadBytes, m.PlainTaskBytes+m.PlainEntryBytes, m.PerJob())
		fmt.Fprintf(w, "| the same, completed tasks shown on the dashboard (WriteResult) (B) | | %.0f | |\n", m.ShownPerJob())
	}

	// asynq+id is what asynq users already have: the second baseline.
	fmt.Fprintln(w, "\n| measure | asynq+id | onceq | onceq / asynq+id: median (IQR) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for i := range r.Groups {
		g := &r.Groups[i]
		if g.Unit != "tasks" && g.Unit != "jobs" {
			continue
		}
		id, _ := g.result(sideRetained)
		o, _ := g.result(sideOnceq)
		fmt.Fprintf(w, "| %s (%s/s; CPU per %s, Go + Redis, µs) | %s; %.0f | %s; %.0f | %s |\n", g.Name, g.Unit, strings.TrimSuffix(g.Unit, "s"),
			thousands(id.OpsPerSec), id.GoCPUus+id.RedisCPUus, thousands(o.OpsPerSec), o.GoCPUus+o.RedisCPUus, ratio(g.Name, sideOnceq, sideRetained))
	}
	for g := range r.groupsNamed("enqueue") {
		id, _ := g.result(enqPlainID)
		d, _ := g.result(enqDefault)
		fmt.Fprintf(w, "| enqueue, default policy, g=%d (enqueues/s; CPU per enqueue, Go + Redis, µs) | %s; %.0f | %s; %.0f | %s |\n", g.Goroutines,
			thousands(id.OpsPerSec), id.GoCPUus+id.RedisCPUus, thousands(d.OpsPerSec), d.GoCPUus+d.RedisCPUus, ratio(g.Name, enqDefault, enqPlainID))
	}
	fmt.Fprintln(w, "\n| target (issue 41, then issue 24's that stand) | want | got | | load |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, t := range r.Targets {
		got := t.got()
		if t.Detail != "" {
			got += " (" + t.Detail + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", t.Name, t.Want, got, t.verdict(), t.loadText())
	}
	if note := r.trustNote(); note != "" {
		fmt.Fprintf(w, "\nNot a final run: %s.\n", note)
	}
}

// thousands formats n as an integer with comma separators.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
