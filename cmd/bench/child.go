package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A worker subprocess is this program re-executed with -worker. It speaks a
// line protocol on stdin/stdout, one command at a time, replying "ok ..."
// or "err <message>":
//
//	init <redis-url> <cpuprofile|->   connect
//	run <side> <queue> <type> <conc>  build a server for one queue
//	go                                start it (CPU and trips counted from here)
//	count                             -> ok <handled>
//	stop                              shut down -> ok <handled> <last-unix-ns> <cpu-ns> <trips> <task-trips> <allocs>
//	quit                              exit
func serveWorker(ctx context.Context, in io.Reader, out, warn io.Writer) error {
	var (
		env  *redisEnv
		host *workerHost
		run  *serverRun
		cpu  time.Duration
		objs uint64
		trip int64
		task int64
		prof *os.File
	)
	defer func() {
		if run != nil {
			run.stop()
		}
		if host != nil {
			host.Close()
		}
		if env != nil {
			env.Close()
		}
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
	}()
	sc := bufio.NewScanner(in)
	reply := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "init" && len(f) == 3 && env == nil:
			if env, err = openRedis(ctx, f[1]); err != nil {
				break
			}
			if host, err = newWorkerHost(env, warn); err != nil {
				break
			}
			if f[2] != "-" {
				if prof, err = os.Create(f[2]); err == nil {
					err = pprof.StartCPUProfile(prof)
				}
			}
			if err == nil {
				reply("ok")
			}
		case f[0] == "run" && len(f) == 5 && host != nil && run == nil:
			var conc int
			if conc, err = strconv.Atoi(f[4]); err == nil {
				run, err = host.prepare(f[1], f[2], f[3], conc, 0)
			}
			if err == nil {
				reply("ok")
			}
		case f[0] == "go" && run != nil:
			runtime.GC()
			cpu, objs = processCPU(), heapAllocs()
			trip, task = host.trips.load()
			if err = run.start(); err == nil {
				reply("ok")
			}
		case f[0] == "count" && run != nil:
			reply("ok %d", run.count.Load())
		case f[0] == "stop" && run != nil:
			run.stop()
			t, tt := host.trips.load()
			reply("ok %d %d %d %d %d %d", run.count.Load(), run.last.Load(), int64(processCPU()-cpu), t-trip, tt-task, heapAllocs()-objs)
			run = nil
		case f[0] == "quit":
			return nil
		default:
			err = fmt.Errorf("unexpected command %q", sc.Text())
		}
		if err != nil {
			reply("err %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	return sc.Err()
}

// child is the parent's handle on a worker subprocess.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex
	wait chan error
}

func startChild(cmd *exec.Cmd, redisURL, cpuprofile string) (*child, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker subprocess: %w", err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out), wait: make(chan error, 1)}
	go func() { c.wait <- cmd.Wait() }()
	if cpuprofile == "" {
		cpuprofile = "-"
	}
	if _, err := c.call("init", redisURL, cpuprofile); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// call sends one command and returns the fields after "ok".
func (c *child) call(args ...string) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.in, strings.Join(args, " ")); err != nil {
		return nil, fmt.Errorf("worker %s: %w", args[0], err)
	}
	if !c.out.Scan() {
		return nil, fmt.Errorf("worker %s: subprocess gone: %v", args[0], c.out.Err())
	}
	f := strings.Fields(c.out.Text())
	if len(f) == 0 || f[0] != "ok" {
		return nil, fmt.Errorf("worker %s: %s", args[0], c.out.Text())
	}
	vals := make([]int64, 0, len(f)-1)
	for _, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("worker %s: bad reply %q", args[0], c.out.Text())
		}
		vals = append(vals, n)
	}
	return vals, nil
}

// close asks the subprocess to quit and kills it if it does not.
func (c *child) close() {
	fmt.Fprintln(c.in, "quit")
	c.in.Close()
	select {
	case <-c.wait:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.wait
	}
}
