package main

import (
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one run measured; -json writes it as is.
type Report struct {
	Command     string            `json:"command"`
	Started     time.Time         `json:"started"`
	Seconds     float64           `json:"seconds"`
	Go          string            `json:"go"`
	Platform    string            `json:"platform"`
	CPUs        int               `json:"cpus"`
	Redis       string            `json:"redis_version"`
	RedisOwn    bool              `json:"redis_started_by_bench"`
	Settings    Settings          `json:"settings"`
	Groups      []group           `json:"groups"`
	Comparisons []Comparison      `json:"comparisons"`
	Memory      *MemoryResult     `json:"memory,omitempty"`
	Remembered  *RememberedResult `json:"remembered,omitempty"`
	Cluster     *ClusterResult    `json:"cluster,omitempty"`
	Join        []JoinRow         `json:"join,omitempty"`
	// Network is how the bench reached its Redis when not over loopback
	// (-netns): the namespace's veth pair and the netem delay, or why none.
	Network string      `json:"network,omitempty"`
	Load    LoadSummary `json:"load_avg_1m"`
	Targets []Target    `json:"targets"`
}

// LoadSummary is the machine's 1-minute load average at the end of every
// measured stretch. This run's own processes add about the number of its
// busy threads; much more means other work shared the CPUs.
type LoadSummary struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
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
	HandlerWait       string `json:"handler_wait,omitempty"` // the realistic rows' (-io-wait)
	History           bool   `json:"history,omitempty"`      // onceq's jobs keep a history (-history)
}

func (r *Report) group(name string) *group {
	for i := range r.Groups {
		if r.Groups[i].Name == name {
			return &r.Groups[i]
		}
	}
	return nil
}

// compareAll adds the comparisons worth reading, the load summary and
// the targets.
func (r *Report) compareAll() {
	add := func(g *group, test, base, kind string) {
		if c, ok := g.compare(test, base, kind); ok {
			r.Comparisons = append(r.Comparisons, c)
		}
	}
	var loads []float64
	for i := range r.Groups {
		g := &r.Groups[i]
		g.summarize()
		for _, res := range g.Results {
			for _, rd := range res.Rounds {
				loads = append(loads, rd.Load)
			}
		}
		switch {
		case g.Unit == "tasks" || g.Unit == "jobs":
			add(g, sideOnceq, sideBare, "throughput")
			add(g, sideOnceq, sideRetained, "throughput")
			add(g, sideRetained, sideBare, "throughput")
		case strings.HasPrefix(g.Name, "enqueue"):
			for _, side := range []string{enqDefault, enqWindow, enqRate, enqPlainID, enqPlainHdr} {
				add(g, side, enqPlain, "throughput")
			}
			add(g, enqDefault, enqPlainID, "throughput")
			add(g, enqDefault, enqPlainHdr, "throughput")
		case strings.HasPrefix(g.Name, "duplicate"):
			add(g, dupRepeat, dupFirst, "cost")
		}
	}
	if r.Memory != nil {
		loads = append(loads, r.Memory.Load)
	}
	if r.Cluster != nil {
		loads = append(loads, r.Cluster.Load)
	}
	if len(loads) > 0 {
		r.Load = LoadSummary{Min: slices.Min(loads), Median: median(loads), Max: slices.Max(loads)}
	}
	r.Targets = r.targets()
}

// groupsNamed yields the groups whose name starts with prefix.
func (r *Report) groupsNamed(prefix string) iter.Seq[*group] {
	return func(yield func(*group) bool) {
		for i := range r.Groups {
			if strings.HasPrefix(r.Groups[i].Name, prefix) && !yield(&r.Groups[i]) {
				return
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
	if r.Network != "" {
		fmt.Fprintln(w, "network:", r.Network)
	}
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
		row("", "side", unit+"/s", "trips/"+unit, "cmds/"+unit, "Go us/"+unit, "Redis us/"+unit, "(in scripts)", "allocs/"+unit, "")
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
					res.CommandsPerOp, res.GoCPUus, res.RedisCPUus, fmt.Sprintf("(%.2f)", res.ScriptUS), fmt.Sprintf("%.1f", res.AllocsPerOp), extra(g, res.Side))
			}
		}
		tw.Flush()
	}
	ratio := func(g *group, test, base string) string {
		c, ok := r.comparison(g.Name, test, base)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%s/%s %.3f IQR %.2f..%.2f [%.2f..%.2f] CPU +%.1f us Go +%.1f us Redis", test, base, c.Median, c.Q1, c.Q3,
			minOf(c.PerRound), maxOf(c.PerRound), c.AddedGoUS, c.AddedRedisUS)
	}

	sideTable(fmt.Sprintf("1. Processing no-op tasks end to end, N=%d per side per round\n"+
		"   asynq = plain tasks; asynq+id = TaskID+Retention tasks, no middleware; onceq = Producer tasks + dedup.Server, as cmd/worker runs;\n"+
		"   trips: all round trips per task (in brackets: on the task path, without per-process background)", s.N),
		"task", func(g *group) bool { return g.Unit == "tasks" },
		func(g *group, side string) string {
			switch side {
			case sideOnceq:
				if c, ok := r.comparison(g.Name, sideOnceq, sideRetained); ok {
					return ratio(g, sideOnceq, sideBare) + fmt.Sprintf("; /asynq+id %.3f IQR %.2f..%.2f", c.Median, c.Q1, c.Q3)
				}
				return ratio(g, sideOnceq, sideBare)
			case sideRetained:
				return ratio(g, sideRetained, sideBare)
			}
			return ""
		})

	sideTable(fmt.Sprintf("1b. End to end: N=%d jobs per side per round, one in %d a repeat of an earlier one, enqueued by %d goroutines\n"+
		"   while one server of c=%d works; timed from the first enqueue to the last task run; ops = jobs offered, repeats included\n"+
		"   asynq enqueues repeats as new tasks (it cannot tell); asynq+id refuses them by TaskID conflict; onceq by its Producer", s.N, e2eRepeatEvery, e2eConc, e2eConc),
		"job", func(g *group) bool { return g.Unit == "jobs" },
		func(g *group, side string) string {
			res, _ := g.result(side)
			cpu := fmt.Sprintf("CPU %.0f us/job", res.GoCPUus+res.RedisCPUus)
			if side == sideBare {
				return cpu
			}
			return cpu + "; " + ratio(g, side, sideBare)
		})

	sideTable(fmt.Sprintf("2. Enqueue, %d enqueues per side per round, sides alternating in chunks\n"+
		"   asynq = Client.Enqueue, no options; asynq+id = with TaskID+Retention; asynq+id+hdr = also onceq's fingerprint header;\n"+
		"   default = Producer, unique window (TaskID+header, its record read in the insert); window, rate = default + one rule", s.EnqueueN),
		"op", func(g *group) bool { return strings.HasPrefix(g.Name, "enqueue") },
		func(g *group, side string) string {
			if side == enqPlain {
				return ""
			}
			return ratio(g, side, enqPlain)
		})

	if r.group("duplicate describe g="+strconv.Itoa(firstOr(r.Settings.DupGoroutines, 1))) != nil {
		fmt.Fprintf(w, "\n2b. Rejected duplicate vs first insert (Producer.Enqueue of the same %d keys twice)\n", s.EnqueueN)
		row("", "first us/op", "dup us/op", "first trips", "dup trips", "dup/first cost", "per round")
	}
	for g := range r.groupsNamed("duplicate") {
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

	if len(r.Join) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The worker's join: a Server (claim and completion ride asynq's dequeue and acknowledgement) against asynq's server with the Middleware (calls of their own):")
		printJoins(w, r.Join)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "\n4. Redis memory per remembered job (MEMORY USAGE of all %d keys left by %d jobs per side; %d B payload, %d B result kept)\n",
			m.Sampled, m.Tasks, m.PayloadBytes, m.ResultBytes)
		row("onceq's keys (done record with the result)", fmt.Sprintf("%.0f B", m.RecordBytes))
		row("completed onceq task asynq:{q}:t:<key>", fmt.Sprintf("%.0f B", m.TaskBytes))
		row("its asynq:{q}:completed zset entry", fmt.Sprintf("%.0f B", m.CompletedEntryBytes))
		row("= per remembered onceq job", fmt.Sprintf("%.0f B", m.PerJob()))
		row("shown on the dashboard (WriteResult): record + task + entry", fmt.Sprintf("%.0f + %.0f + %.0f = %.0f B",
			m.ShownRecordBytes, m.ShownTaskBytes, m.ShownEntryBytes, m.ShownPerJob()))
		row("asynq+id: completed task + zset entry, no headers", fmt.Sprintf("%.0f B", m.PlainTaskBytes+m.PlainEntryBytes))
		tw.Flush()
	}
	if m := r.Remembered; m != nil {
		fmt.Fprintf(w, "\n4b. Redis memory per remembered key (used_memory before and after %d keys claimed and completed, own redis-server; %d B result)\n",
			m.Keys, len(memResult))
		row("full record, result kept (24 h done TTL)", fmt.Sprintf("%.1f B", m.FullBytes))
		row("compact mark alone (24 h done TTL, result TTL over)", fmt.Sprintf("%.1f B", m.CompactBytes))
		row("compact mark alone (30-day done TTL)", fmt.Sprintf("%.1f B", m.Compact30dBytes))
		row("mark hashes listpack-encoded", fmt.Sprint(m.Listpack))
		row("per key-day, 30-day window (mark held 1.25 x its window)", fmt.Sprintf("%.1f B", m.Compact30dBytes*residence))
		row("1 M keys a day, 30-day window: marks", fmt.Sprintf("%.2f GB", PerDailyKey(m.Compact30dBytes, 30)*1e6/1e9))
		row("1 M keys a day, 24 h window: marks + 1 h of full records", fmt.Sprintf("%.2f GB",
			(PerDailyKey(m.CompactBytes, 1)+m.FullBytes/24)*1e6/1e9))
		tw.Flush()
	}
	if c := r.Cluster; c != nil {
		fmt.Fprintf(w, "\n5. Cluster of %d masters, one job type on one queue (its %d home queues), %d jobs enqueued and processed by onceq (c=%d): %.0f jobs/s, %.2f round trips per task on its path, %.0f µs of Redis CPU per job\n",
			len(c.Masters), c.Queues, c.Jobs, c.Concurrency, c.JobsPerSec, c.TaskPathTripsPerTask, c.RedisUsPerTask)
		for _, m := range c.Masters {
			row(m.Addr, fmt.Sprintf("%d commands", m.Commands), fmt.Sprintf("%.0f %%", 100*float64(m.Commands)/float64(max(c.total(), 1))))
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nTargets (issue 41, then issue 24's that stand; median of %d paired rounds; load average %s)\n", s.Rounds, r.Load)
	tl := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tl, "  target\twant\tgot\t\tload\t\n")
	for _, t := range r.Targets {
		fmt.Fprintf(tl, "  %s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Want, t.got(), t.verdict(), t.loadText(), t.Detail)
	}
	tl.Flush()
	if note := r.trustNote(); note != "" {
		fmt.Fprintln(w, "\nnote:", note)
	}
	fmt.Fprintf(w, "\nran in %.1f s: %s\n", r.Seconds, r.Command)
}

func (l LoadSummary) String() string {
	return fmt.Sprintf("%.1f median, %.1f..%.1f", l.Median, l.Min, l.Max)
}

// trustNote says why the targets of this run are not the final word.
func (r *Report) trustNote() string {
	var why []string
	if r.Settings.Rounds < 7 {
		why = append(why, fmt.Sprintf("%d rounds (the targets want >= 7)", r.Settings.Rounds))
	}
	// The run itself keeps about two threads busy; more load is other work.
	if r.Load.Median > float64(r.CPUs)+2 {
		why = append(why, fmt.Sprintf("load average %.1f on %d CPUs: other work shared the machine", r.Load.Median, r.CPUs))
	}
	return strings.Join(why, "; ")
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
