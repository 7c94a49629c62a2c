package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/redistest"
)

// workerEnv makes the test binary act as the benchmark's worker subprocess.
const workerEnv = "ONCEQ_BENCH_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := serveWorker(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "bench worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(redistest.Main(m))
}

// TestSmoke runs every part of the benchmark with tiny numbers against a
// dedicated server, as a given server (-redis-url), and checks the numbers
// are sane and the run leaves no key behind.
func TestSmoke(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	worker := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		return cmd
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	rep, err := run(ctx, []string{
		"-n", "200", "-rounds", "1", "-enqueue-n", "50", "-memory-n", "50",
		"-conc", "10", "-two-conc", "10", "-goroutines", "1,8", "-dup-goroutines", "1",
		"-redis-url", "redis://" + srv.Addr + "/0", "-json", jsonPath,
	}, &stdout, &stderr, worker)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Log("\n" + stdout.String())

	var processed int
	for _, g := range rep.Groups {
		for _, r := range g.Results {
			if len(r.Rounds) != 1 {
				t.Errorf("%s %s: %d rounds, want 1", g.Name, r.Side, len(r.Rounds))
			}
			if r.OpsPerSec <= 0 {
				t.Errorf("%s %s: %v ops/s", g.Name, r.Side, r.OpsPerSec)
			}
			switch {
			case g.Unit == "tasks" && r.Side == sideOnceq:
				processed++
				if r.ops != 200 {
					t.Errorf("%s: %d tasks processed, want 200", g.Name, r.ops)
				}
				if r.TripsPerOp < 2 || r.TripsPerOp > 6 {
					t.Errorf("%s: %.3f round trips per onceq task, want 2..6", g.Name, r.TripsPerOp)
				}
				if r.TaskPathTripsPerOp < 3.9 || r.TaskPathTripsPerOp > 4.1 {
					t.Errorf("%s: %.3f task-path round trips per onceq task, want about 4", g.Name, r.TaskPathTripsPerOp)
				}
			case g.Unit == "tasks" && r.Side == sideBare:
				if r.TaskPathTripsPerOp < 1.9 || r.TaskPathTripsPerOp > 2.1 {
					t.Errorf("%s: %.3f task-path round trips per asynq task, want about 2", g.Name, r.TaskPathTripsPerOp)
				}
			case strings.HasPrefix(g.Name, "enqueue") && (r.Side == enqDefault || r.Side == enqPlainID || r.Side == enqPlainHdr):
				if r.trips != r.ops {
					t.Errorf("%s %s: %d round trips for %d enqueues, want exactly 1 each", g.Name, r.Side, r.trips, r.ops)
				}
			case strings.HasPrefix(g.Name, "enqueue") && (r.Side == enqWindow || r.Side == enqRate):
				if r.trips != 2*r.ops {
					t.Errorf("%s %s: %d round trips for %d enqueues, want 2 each", g.Name, r.Side, r.trips, r.ops)
				}
			case g.Name == "duplicate brief g=1" && r.Side == dupRepeat:
				if r.trips != r.ops {
					t.Errorf("%s: %d round trips for %d refused duplicates, want 1 each", g.Name, r.trips, r.ops)
				}
			}
		}
	}
	if processed != 2 {
		t.Errorf("%d processing layouts with an onceq side, want 2 (in-process and two subprocesses)", processed)
	}
	if m := rep.Memory; m == nil || m.RecordBytes <= 0 || m.TaskBytes <= 0 || m.PlainTaskBytes <= 0 {
		t.Errorf("memory: %+v", rep.Memory)
	}
	if len(rep.Targets) == 0 || !strings.Contains(stdout.String(), "Targets") {
		t.Error("no targets reported")
	}

	var decoded Report
	if b, err := os.ReadFile(jsonPath); err != nil || json.Unmarshal(b, &decoded) != nil || len(decoded.Groups) != len(rep.Groups) {
		t.Errorf("json report: %v", err)
	}

	// A given server keeps only what was there: the run deleted its keys.
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("keys left behind: %v", keys)
	}
}
