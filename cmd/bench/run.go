package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// run parses args, runs the benchmark and prints its report to stdout;
// progress goes to stderr. workerCmd builds a worker subprocess (nil: this
// executable with -worker).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, workerCmd func() *exec.Cmd) (rep *Report, err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      config
		quick    = fs.Bool("quick", false, "smoke run: -n 1000 -rounds 3 -enqueue-n 300 -memory-n 300")
		jsonPath = fs.String("json", "", "also write the full report as JSON to this file")
		conc     = fs.String("conc", "10,50", "concurrencies of the single in-process asynq server")
		twoConc  = fs.String("two-conc", "50", "concurrency of each of the two worker subprocesses (empty: skip)")
		gs       = fs.String("goroutines", "1,8,32", "enqueue concurrencies")
		dupG     = fs.String("dup-goroutines", "1,8", "goroutines for the duplicate-vs-insert cost")
		phases   = fs.String("phases", "process,e2e,enqueue,duplicate,memory", "which parts to run (also: join, the worker with its join and without)")
		delay    = fs.Duration("delay", 200*time.Microsecond, "join phase: also through a loopback proxy holding each chunk this long, either way (0: loopback only)")
		verbose  = fs.Bool("v", true, "print a progress line per measurement to stderr")
		mdPath   = fs.String("markdown", "", "also write docs/performance.md's tables as Markdown to this file (- for stdout)")
		from     = fs.String("from", "", "measure nothing: report a run saved with -json")
		ports    = fs.String("ports", "", "loopback port range for the redis-server the bench starts, e.g. 7000-7099 (default: any free port)")
	)
	fs.IntVar(&cfg.N, "n", 20000, "tasks per processing measurement")
	fs.IntVar(&cfg.Rounds, "rounds", 7, "paired rounds per comparison")
	fs.IntVar(&cfg.EnqueueN, "enqueue-n", 4000, "enqueues per enqueue measurement")
	fs.BoolVar(&cfg.History, "history", false, "onceq's jobs keep their keys' history (Spec.History, as the daemon's types do): run beside a run without it, the difference is its cost")
	fs.DurationVar(&cfg.IOWait, "io-wait", time.Millisecond, "the realistic handler's I/O wait, measured beside the no-op handler at c=10 and end to end (0: no-op only)")
	fs.IntVar(&cfg.MemoryN, "memory-n", 2000, "completed jobs retained for the memory sample")
	fs.IntVar(&cfg.MemoryKeys, "memory-keys", 1_000_000, "keys remembered for the full record's and the compact mark's bytes per key (memory phase)")
	fs.BoolVar(&cfg.Cluster, "cluster", false, "also start a 3-master Redis Cluster (needs redis-cli) and measure how one job type's commands spread over it")
	fs.BoolVar(&cfg.Netns, "netns", false, "run the bench's redis-server one hop away: in a network namespace over a veth pair (needs root, ip, tc)")
	fs.DurationVar(&cfg.NetnsDelay, "netns-delay", 200*time.Microsecond, "with -netns: netem delay on packets towards Redis, where the kernel has netem (0: none)")
	fs.StringVar(&cfg.RedisURL, "redis-url", "", "use this Redis instead of starting one; it is never flushed, only the run's own keys are deleted")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of this process here (workers: <file>.worker0/1)")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write this process's allocation profile here at the end (go tool pprof -sample_index alloc_objects)")
	fs.DurationVar(&cfg.SideTimeout, "side-timeout", 2*time.Minute, "fail a processing measurement that takes longer")
	err = fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *from != "" {
		rep, err := readReport(*from)
		if err != nil {
			return nil, err
		}
		return rep, rep.write(stdout, "", *mdPath)
	}
	if cfg.Ports, err = redistest.ParsePorts(*ports); err != nil {
		return nil, err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]*int{"n": &cfg.N, "enqueue-n": &cfg.EnqueueN, "memory-n": &cfg.MemoryN, "memory-keys": &cfg.MemoryKeys} {
			if !set[name] {
				*v = map[string]int{"n": 1000, "enqueue-n": 300, "memory-n": 300, "memory-keys": 20000}[name]
			}
		}
		if !set["rounds"] {
			cfg.Rounds = 3
		}
	}
	for _, l := range []struct {
		s   string
		dst *[]int
	}{{*conc, &cfg.Conc}, {*twoConc, &cfg.TwoConc}, {*gs, &cfg.Goroutines}, {*dupG, &cfg.DupG}} {
		if *l.dst, err = intList(l.s); err != nil {
			return nil, err
		}
	}
	cfg.Phases = map[string]bool{}
	for p := range strings.SplitSeq(*phases, ",") {
		switch p = strings.TrimSpace(p); p {
		case "process", "e2e", "enqueue", "duplicate", "memory", "join":
			cfg.Phases[p] = true
		case "":
		default:
			return nil, fmt.Errorf("unknown phase %q", p)
		}
	}
	if cfg.N < 1 || cfg.Rounds < 1 || cfg.EnqueueN < 1 || cfg.MemoryN < 1 || cfg.MemoryKeys < 1 {
		return nil, errors.New("-n, -rounds, -enqueue-n and -memory-n must be positive")
	}
	cfg.warn = stderr
	if *verbose {
		cfg.progress = stderr
	}
	cfg.workerCmd = workerCmd
	if cfg.workerCmd == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.workerCmd = func() *exec.Cmd { return exec.Command(exe, "-worker") }
	}

	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.MemProfile != "" {
		defer func() {
			if werr := writeHeapProfile(cfg.MemProfile); werr != nil && err == nil {
				err = werr
			}
		}()
	}

	var env *redisEnv
	switch {
	case cfg.Netns && cfg.RedisURL != "":
		return nil, errors.New("-netns starts its own redis-server: it does not combine with -redis-url")
	case cfg.Netns:
		env, err = startNetnsRedis(ctx, cfg.NetnsDelay)
	case cfg.RedisURL != "":
		env, err = openRedis(ctx, cfg.RedisURL)
	default:
		env, err = startRedis(ctx, cfg.Ports)
	}
	if err != nil {
		return nil, err
	}
	defer env.Close()
	b := newBench(cfg, env)
	defer b.cleanupAll(context.WithoutCancel(ctx))

	rep = &Report{
		Command: "bench " + strings.Join(args, " "), Started: time.Now(),
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		Redis: env.Version, RedisOwn: env.Own, Network: env.network,
		Settings: Settings{N: cfg.N, Rounds: cfg.Rounds, EnqueueN: cfg.EnqueueN, MemoryN: cfg.MemoryN,
			Concurrency: cfg.Conc, TwoProcsConc: cfg.TwoConc, Goroutines: cfg.Goroutines, DupGoroutines: cfg.DupG,
			TaskCheckInterval: taskCheck.String(), HandlerWait: durationOrEmpty(cfg.IOWait), History: cfg.History},
	}
	for _, p := range []struct {
		name string
		fn   func(context.Context) ([]group, error)
	}{{"process", b.processing}, {"e2e", b.endToEnds}, {"enqueue", b.enqueueing}, {"duplicate", b.duplicates}} {
		if !cfg.Phases[p.name] {
			continue
		}
		gs, err := p.fn(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		rep.Groups = append(rep.Groups, gs...)
	}
	if cfg.Phases["join"] {
		if rep.Join, err = b.joins(ctx, *delay); err != nil {
			return nil, fmt.Errorf("join: %w", err)
		}
	}
	if cfg.Phases["memory"] {
		m, err := b.memory(ctx)
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		rep.Memory = &m
		r, err := b.remembered(ctx, cfg.MemoryKeys)
		if err != nil {
			return nil, fmt.Errorf("memory: remembered keys: %w", err)
		}
		rep.Remembered = &r
	}
	if cfg.Cluster {
		c, err := b.cluster(ctx)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		rep.Cluster = &c
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	rep.compareAll()
	return rep, rep.write(stdout, *jsonPath, *mdPath)
}

// write prints the report and saves it as JSON and Markdown where asked.
func (r *Report) write(stdout io.Writer, jsonPath, mdPath string) error {
	r.print(stdout)
	if jsonPath != "" {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(out, '\n'), 0o644); err != nil {
			return err
		}
	}
	switch mdPath {
	case "":
	case "-":
		fmt.Fprintln(stdout)
		r.markdown(stdout)
	default:
		var b strings.Builder
		r.markdown(&b)
		if err := os.WriteFile(mdPath, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// writeHeapProfile writes every allocation made since start (alloc_objects,
// alloc_space): where the per-task allocations come from.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// durationOrEmpty is d as text, "" for 0 (left out of the JSON).
func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
