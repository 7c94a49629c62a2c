package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one run measured; -json writes it as is.
type Report struct {
	Command     string        `json:"command"`
	Started     time.Time     `json:"started"`
	Seconds     float64       `json:"seconds"`
	Go          string        `json:"go"`
	Platform    string        `json:"platform"`
	CPUs        int           `json:"cpus"`
	Redis       string        `json:"redis_version"`
	RedisOwn    bool          `json:"redis_started_by_bench"`
	Settings    Settings      `json:"settings"`
	Groups      []group       `json:"groups"`
	Comparisons []Comparison  `json:"comparisons"`
	Memory      *MemoryResult `json:"memory,omitempty"`
	Targets     []Target      `json:"targets"`
}

// Settings are the knobs the numbers depend on.
type Settings struct {
	N                 int    `json:"n"`
	Rounds            int    `json:"rounds"`
	EnqueueN          int    `json:"enqueue_n"`
	MemoryN           int    `json:"memory_n"`
	Concurrency       []int  `json:"concurrency"`
	TwoProcsConc      []int  `json:"two_procs_concurrency"`
	Goroutines        []int  `json:"goroutines"`
	DupGoroutines     []int  `json:"duplicate_goroutines"`
	TaskCheckInterval string `json:"task_check_interval"`
}

// Target is one goal from the issue, checked against the run.
type Target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`
	Pass bool    `json:"pass"`
}

func (r *Report) group(name string) *group {
	for i := range r.Groups {
		if r.Groups[i].Name == name {
			return &r.Groups[i]
		}
	}
	return nil
}

// compareAll adds the comparisons worth reading and checks the targets.
func (r *Report) compareAll() {
	add := func(g *group, test, base, kind string) (Comparison, bool) {
		c, ok := g.compare(test, base, kind)
		if ok {
			r.Comparisons = append(r.Comparisons, c)
		}
		return c, ok
	}
	target := func(name, want string, got float64, pass bool) {
		r.Targets = append(r.Targets, Target{Name: name, Want: want, Got: got, Pass: pass})
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		g.summarize()
		switch {
		case g.Unit == "tasks":
			c, ok := add(g, sideOnceq, sideBare, "throughput")
			add(g, sideOnceq, sideRetained, "throughput")
			add(g, sideRetained, sideBare, "throughput")
			if !ok {
				continue
			}
			want := 0.92
			if g.Servers > 1 {
				want = 0.75
			}
			target("processing onceq/asynq, "+strings.TrimPrefix(g.Name, "process "), fmt.Sprintf(">= %.2f", want), c.Median, c.Median >= want)
			if o, ok := g.result(sideOnceq); ok {
				target("round trips per onceq task (task path), "+strings.TrimPrefix(g.Name, "process "), "<= 4", o.TaskPathTripsPerOp, o.task <= 4*o.ops)
			}
			target("added CPU us per task (Go+Redis), "+strings.TrimPrefix(g.Name, "process "), "<= 20", c.AddedCPUus, c.AddedCPUus <= 20)
		case strings.HasPrefix(g.Name, "enqueue"):
			c, ok := add(g, enqDefault, enqPlain, "throughput")
			add(g, enqDefault, enqPlainID, "throughput")
			add(g, enqDefault, enqPlainHdr, "throughput")
			add(g, enqPlainID, enqPlain, "throughput")
			add(g, enqPlainHdr, enqPlain, "throughput")
			add(g, enqWindow, enqPlain, "throughput")
			add(g, enqRate, enqPlain, "throughput")
			if !ok {
				continue
			}
			sfx := strings.TrimPrefix(g.Name, "enqueue ")
			target("enqueue default/asynq, "+sfx, ">= 0.95", c.Median, c.Median >= 0.95)
			if d, ok := g.result(enqDefault); ok {
				target("round trips per default enqueue, "+sfx, "== 1", d.TripsPerOp, d.trips == d.ops)
			}
		case strings.HasPrefix(g.Name, "duplicate"):
			c, ok := add(g, dupRepeat, dupFirst, "cost")
			if ok {
				target("duplicate/first-insert cost, "+strings.TrimPrefix(g.Name, "duplicate "), "<= 1.00", c.Median, c.Median <= 1)
			}
		}
	}
}

func (r *Report) comparison(group, test, base string) (Comparison, bool) {
	for _, c := range r.Comparisons {
		if c.Group == group && c.Test == test && c.Base == base {
			return c, true
		}
	}
	return Comparison{}, false
}

// print writes the human-readable tables.
func (r *Report) print(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "onceq bench: %s %s, %d CPUs, redis %s (%s), %d paired rounds, median shown\n",
		r.Go, r.Platform, r.CPUs, r.Redis, map[bool]string{true: "own redis-server", false: "given server"}[r.RedisOwn], s.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...any) {
		for _, c := range cells {
			switch v := c.(type) {
			case float64:
				fmt.Fprintf(tw, "%.2f\t", v)
			default:
				fmt.Fprintf(tw, "%v\t", v)
			}
		}
		fmt.Fprintln(tw)
	}
	sideTable := func(title, unit string, filter func(*group) bool, extra func(g *group, side string) string) {
		if !slices.ContainsFunc(r.Groups, func(g group) bool { return filter(&g) }) {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		row("", "side", unit+"/s", "trips/"+unit, "cmds/"+unit, "Go us/"+unit, "Redis us/"+unit, "(in scripts)", "")
		for i := range r.Groups {
			g := &r.Groups[i]
			if !filter(g) {
				continue
			}
			for j, res := range g.Results {
				name := ""
				if j == 0 {
					name = strings.SplitN(g.Name, " ", 2)[1]
				}
				trips := fmt.Sprintf("%.3f", res.TripsPerOp)
				if g.Unit == "tasks" {
					trips = fmt.Sprintf("%.4f (%.4f)", res.TripsPerOp, res.TaskPathTripsPerOp)
				}
				row(name, res.Side, fmt.Sprintf("%.0f", res.OpsPerSec), trips,
					res.CommandsPerOp, res.GoCPUus, res.RedisCPUus, fmt.Sprintf("(%.2f)", res.ScriptUS), extra(g, res.Side))
			}
		}
		tw.Flush()
	}
	ratio := func(g *group, test, base string) string {
		c, ok := r.comparison(g.Name, test, base)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%s/%s %.3f [%.2f..%.2f] +%.1f us CPU", test, base, c.Median, minOf(c.PerRound), maxOf(c.PerRound), c.AddedCPUus)
	}

	sideTable(fmt.Sprintf("1. Processing no-op tasks end to end, N=%d per side per round\n"+
		"   asynq = plain tasks; asynq+id = TaskID+Retention tasks, no middleware; onceq = Producer tasks + dedup.Middleware\n"+
		"   trips: all round trips per task (in brackets: on the task path, without per-process background)", s.N),
		"task", func(g *group) bool { return g.Unit == "tasks" },
		func(g *group, side string) string {
			switch side {
			case sideOnceq:
				return ratio(g, sideOnceq, sideBare)
			case sideRetained:
				return ratio(g, sideRetained, sideBare)
			}
			return ""
		})

	sideTable(fmt.Sprintf("2. Enqueue, %d enqueues per side per round, sides alternating in chunks\n"+
		"   asynq = Client.Enqueue, no options; asynq+id = with TaskID+Retention; asynq+id+hdr = also onceq's two headers;\n"+
		"   default = Producer, unique window (TaskID+Retention+headers); window, rate = default + one rule", s.EnqueueN),
		"op", func(g *group) bool { return strings.HasPrefix(g.Name, "enqueue") },
		func(g *group, side string) string {
			if side == enqPlain {
				return ""
			}
			return ratio(g, side, enqPlain)
		})

	if r.group("duplicate brief g="+strconv.Itoa(firstOr(r.Settings.DupGoroutines, 1))) != nil {
		fmt.Fprintf(w, "\n2b. Rejected duplicate vs first insert (Producer.Enqueue of the same %d keys twice)\n", s.EnqueueN)
		row("", "first us/op", "dup us/op", "first trips", "dup trips", "dup/first cost", "per round")
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		if !strings.HasPrefix(g.Name, "duplicate") {
			continue
		}
		f, _ := g.result(dupFirst)
		d, _ := g.result(dupRepeat)
		c, _ := r.comparison(g.Name, dupRepeat, dupFirst)
		row(strings.TrimPrefix(g.Name, "duplicate "), f.USPerOp, d.USPerOp, fmt.Sprintf("%.3f", f.TripsPerOp),
			fmt.Sprintf("%.3f", d.TripsPerOp), fmt.Sprintf("%.3f", c.Median), fmt.Sprintf("[%.2f..%.2f]", minOf(c.PerRound), maxOf(c.PerRound)))
	}
	tw.Flush()

	if len(r.Groups) > 0 {
		fmt.Fprintln(w, "\n3. Redis commands per op (INFO commandstats; commands run by scripts included)")
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		if g.Unit != "tasks" && g.Name != "enqueue g=1" {
			continue
		}
		for _, res := range g.Results {
			var parts []string
			for _, c := range topCalls(res.CallsPerOp, 10) {
				parts = append(parts, fmt.Sprintf("%s %.2f", c, res.CallsPerOp[c]))
			}
			fmt.Fprintf(w, "  %-22s %-9s %s\n", strings.SplitN(g.Name, " ", 2)[1], res.Side, strings.Join(parts, ", "))
		}
	}

	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "\n4. Redis memory per retained item (MEMORY USAGE, %d of %d keys sampled)\n", m.Sampled, m.Tasks)
		row("idempotency record onceq:{ns/id}:rec (done, empty result)", fmt.Sprintf("%.0f B", m.RecordBytes))
		row("completed onceq task asynq:{q}:t:<key> (with headers)", fmt.Sprintf("%.0f B", m.TaskBytes))
		row("its asynq:{q}:completed zset entry", fmt.Sprintf("%.0f B", m.CompletedEntryBytes))
		row("= per completed onceq job, retained for the unique window", fmt.Sprintf("%.0f B", m.PerJob()))
		row("completed asynq task with TaskID+Retention, no headers", fmt.Sprintf("%.0f B", m.PlainTaskBytes))
		tw.Flush()
	}

	fmt.Fprintln(w, "\nTargets")
	for _, t := range r.Targets {
		verdict := "MISS"
		if t.Pass {
			verdict = "PASS"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%s\t\n", t.Name, t.Want, t.Got, verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nran in %.1f s: %s\n", r.Seconds, r.Command)
}

// brief is a progress line: each side's median throughput.
func brief(g group) string {
	g.summarize()
	var parts []string
	for _, r := range g.Results {
		parts = append(parts, fmt.Sprintf("%s %.0f/s", r.Side, r.OpsPerSec))
	}
	return strings.Join(parts, "  ")
}

func firstOr(v []int, def int) int {
	if len(v) == 0 {
		return def
	}
	return v[0]
}

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}
