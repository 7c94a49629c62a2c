package main

import (
	"maps"
	"slices"
)

// group is one paired comparison: the same sides measured round after round.
type group struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"` // what one op is: "tasks" or "enqueues"
	Servers     int    `json:"servers,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Goroutines  int    `json:"goroutines,omitempty"`
	// HandlerWaitMS is how long each handler waited (the realistic rows:
	// 1 ms of I/O wait); 0 for the no-op handler.
	HandlerWaitMS float64      `json:"handler_wait_ms,omitempty"`
	Results       []SideResult `json:"results"`
	sides         []string
	samples       map[string][]sample
}

func newGroup(name, unit string, sides []string) group {
	return group{Name: name, Unit: unit, sides: sides, samples: map[string][]sample{}}
}

func (g *group) add(side string, s sample) { g.samples[side] = append(g.samples[side], s) }

// SideResult sums up one side of a group over its rounds.
type SideResult struct {
	Side      string  `json:"side"`
	OpsPerSec float64 `json:"ops_per_sec"` // median over rounds
	USPerOp   float64 `json:"us_per_op"`   // median wall time per op
	// Round trips and Redis command calls (INFO commandstats, which counts
	// the commands scripts run too) over all rounds, per op.
	TripsPerOp float64 `json:"round_trips_per_op"`
	// TaskPathTripsPerOp leaves out per-process background trips (see
	// tripCounter); processing only.
	TaskPathTripsPerOp float64            `json:"task_path_round_trips_per_op,omitempty"`
	CommandsPerOp      float64            `json:"redis_commands_per_op"`
	CallsPerOp         map[string]float64 `json:"redis_calls_per_op"`
	GoCPUus            float64            `json:"go_cpu_us_per_op"`    // median
	RedisCPUus         float64            `json:"redis_cpu_us_per_op"` // median
	// ScriptUS is the part of it spent executing scripts (median): the rest
	// is Redis's network and event-loop work, per round trip.
	ScriptUS    float64 `json:"redis_script_us_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"` // median; Go heap objects, all worker processes
	Rounds      []Round `json:"rounds"`
	trips, task int64
	ops         int64
}

// Round is one measurement, as measured.
type Round struct {
	Ops        int     `json:"ops"`
	ElapsedMS  float64 `json:"elapsed_ms"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	Trips      int64   `json:"round_trips"`
	TaskTrips  int64   `json:"task_path_round_trips,omitempty"`
	GoCPUus    float64 `json:"go_cpu_us_per_op"`
	RedisCPUus float64 `json:"redis_cpu_us_per_op"`
	Allocs     float64 `json:"allocs_per_op"`
	Load       float64 `json:"load_avg_1m"`
}

func (g *group) summarize() {
	g.Results = g.Results[:0]
	for _, side := range g.sides {
		ss := g.samples[side]
		r := SideResult{Side: side, CallsPerOp: map[string]float64{}}
		var tput, us, gocpu, rcpu, script, allocs []float64
		calls := map[string]int64{}
		for _, s := range ss {
			tput = append(tput, s.perSec())
			us = append(us, float64(s.Elapsed.Microseconds())/float64(s.Ops))
			gocpu, rcpu, script = append(gocpu, s.goUS()), append(rcpu, s.redisUS()), append(script, s.scriptUS())
			allocs = append(allocs, s.allocsPerOp())
			r.trips += s.Trips
			r.task += s.TaskTrip
			r.ops += int64(s.Ops)
			for c, n := range s.Calls {
				calls[c] += n
			}
			r.Rounds = append(r.Rounds, Round{Ops: s.Ops, ElapsedMS: float64(s.Elapsed.Microseconds()) / 1e3,
				OpsPerSec: s.perSec(), Trips: s.Trips, TaskTrips: s.TaskTrip, GoCPUus: s.goUS(), RedisCPUus: s.redisUS(),
				Allocs: s.allocsPerOp(), Load: s.Load})
		}
		r.OpsPerSec, r.USPerOp, r.GoCPUus, r.RedisCPUus = median(tput), median(us), median(gocpu), median(rcpu)
		r.ScriptUS, r.AllocsPerOp = median(script), median(allocs)
		if r.ops > 0 {
			r.TripsPerOp = float64(r.trips) / float64(r.ops)
			r.TaskPathTripsPerOp = float64(r.task) / float64(r.ops)
			for c, n := range calls {
				r.CallsPerOp[c] = float64(n) / float64(r.ops)
				r.CommandsPerOp += float64(n) / float64(r.ops)
			}
		}
		g.Results = append(g.Results, r)
	}
}

func (g *group) result(side string) (SideResult, bool) {
	for _, r := range g.Results {
		if r.Side == side {
			return r, true
		}
	}
	return SideResult{}, false
}

// Comparison is test against base within a group, round by round.
type Comparison struct {
	Group string `json:"group"`
	Test  string `json:"test"`
	Base  string `json:"base"`
	// Kind "throughput": test ops/s over base ops/s (higher is better);
	// "cost": test wall time per op over base's (lower is better).
	Kind   string  `json:"kind"`
	Median float64 `json:"median"`
	// Q1 and Q3 bound the middle half of the per-round ratios: their
	// distance (the interquartile range) is how much a round can be trusted.
	Q1       float64   `json:"q1"`
	Q3       float64   `json:"q3"`
	PerRound []float64 `json:"per_round"`
	// AddedCPUus is the median per-round difference in Go+Redis CPU per op;
	// AddedGoUS and AddedRedisUS split it.
	AddedCPUus   float64 `json:"added_cpu_us_per_op"`
	AddedGoUS    float64 `json:"added_go_cpu_us_per_op"`
	AddedRedisUS float64 `json:"added_redis_cpu_us_per_op"`
}

func (g *group) compare(test, base, kind string) (Comparison, bool) {
	ts, bs := g.samples[test], g.samples[base]
	if len(ts) == 0 || len(ts) != len(bs) {
		return Comparison{}, false
	}
	c := Comparison{Group: g.Name, Test: test, Base: base, Kind: kind}
	var added, addedGo, addedRedis []float64
	for i := range ts {
		t, b := ts[i], bs[i]
		if kind == "cost" {
			c.PerRound = append(c.PerRound, (t.Elapsed.Seconds()/float64(t.Ops))/(b.Elapsed.Seconds()/float64(b.Ops)))
		} else {
			c.PerRound = append(c.PerRound, t.perSec()/b.perSec())
		}
		addedGo = append(addedGo, t.goUS()-b.goUS())
		addedRedis = append(addedRedis, t.redisUS()-b.redisUS())
		added = append(added, t.goUS()+t.redisUS()-b.goUS()-b.redisUS())
	}
	c.Median, c.AddedCPUus = median(c.PerRound), median(added)
	c.Q1, c.Q3 = quantile(c.PerRound, 0.25), quantile(c.PerRound, 0.75)
	c.AddedGoUS, c.AddedRedisUS = median(addedGo), median(addedRedis)
	return c, true
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile interpolates linearly between the closest ranks (R-7, what
// spreadsheets and numpy default to).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[lo]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// topCalls lists the commands of a side by calls per op, most first.
func topCalls(calls map[string]float64, n int) []string {
	names := slices.Collect(maps.Keys(calls))
	slices.SortFunc(names, func(a, b string) int {
		if calls[a] != calls[b] {
			if calls[a] > calls[b] {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	return names[:min(n, len(names))]
}
