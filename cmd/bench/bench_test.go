package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
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
	mdPath := filepath.Join(t.TempDir(), "out.md")
	var stdout, stderr bytes.Buffer
	args := []string{
		"-n", "200", "-rounds", "2", "-enqueue-n", "50", "-memory-n", "50", "-memory-keys", "20000",
		"-conc", "10", "-two-conc", "10", "-goroutines", "1,8", "-dup-goroutines", "1",
		"-io-wait", "10ms", // long enough that a handler not waiting shows

		"-redis-url", "redis://" + srv.Addr + "/0", "-json", jsonPath, "-markdown", mdPath,
	}
	_, cliErr := exec.LookPath("redis-cli")
	withCluster := cliErr == nil
	if withCluster {
		args = append(args, "-cluster")
	} else {
		t.Log("no redis-cli: the Cluster row goes unmeasured")
	}
	rep, err := run(ctx, args, &stdout, &stderr, worker)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Log("\n" + stdout.String())

	var processed, endToEnd, realistic int
	for _, g := range rep.Groups {
		if g.HandlerWaitMS > 0 {
			// A handler that waits 10 ms bounds c=10 to 1,000 tasks per s,
			// well under a no-op handler's rate: a faster side did not wait.
			// End to end, the repeats come on top (refused, never run; bare
			// asynq runs them, so it stays under the bound itself).
			realistic++
			for _, r := range g.Results {
				limit := float64(g.Concurrency) / g.HandlerWaitMS * 1000
				if g.Unit == "jobs" {
					limit *= float64(e2eRepeatEvery) / float64(e2eRepeatEvery-1)
				}
				if r.OpsPerSec > limit {
					t.Errorf("%s %s: %.0f ops/s, more than c=%d handlers waiting %g ms allow (%.0f)", g.Name, r.Side, r.OpsPerSec, g.Concurrency, g.HandlerWaitMS, limit)
				}
			}
		}
		if g.Unit == "tasks" || g.Unit == "jobs" {
			// asynq+id is a baseline of every processing table, beside bare asynq.
			for _, side := range []string{sideBare, sideRetained, sideOnceq} {
				if _, ok := g.result(side); !ok {
					t.Errorf("%s: no %s side", g.Name, side)
				}
			}
			for _, base := range []string{sideBare, sideRetained} {
				if _, ok := rep.comparison(g.Name, sideOnceq, base); !ok {
					t.Errorf("%s: no onceq/%s comparison", g.Name, base)
				}
			}
		}
		for _, r := range g.Results {
			if len(r.Rounds) != 2 {
				t.Errorf("%s %s: %d rounds, want 2", g.Name, r.Side, len(r.Rounds))
			}
			if r.AllocsPerOp <= 0 || r.GoCPUus <= 0 {
				t.Errorf("%s %s: %.1f allocs and %.1f µs Go CPU per op, want both measured", g.Name, r.Side, r.AllocsPerOp, r.GoCPUus)
			}
			if r.OpsPerSec <= 0 {
				t.Errorf("%s %s: %v ops/s", g.Name, r.Side, r.OpsPerSec)
			}
			switch {
			case g.Unit == "tasks" && r.Side == sideOnceq:
				processed++
				if r.ops != 2*200 {
					t.Errorf("%s: %d tasks processed, want 2 rounds of 200", g.Name, r.ops)
				}
				if r.TripsPerOp < 2 || r.TripsPerOp > 6 {
					t.Errorf("%s: %.3f round trips per onceq task, want 2..6", g.Name, r.TripsPerOp)
				}
				// 4 today (claim, dequeue, complete, ack); issue 24 folds the
				// claim into the dequeue and the completion into the ack,
				// which brings it to 2. The bench must hold for both.
				if r.TaskPathTripsPerOp < 1.9 || r.TaskPathTripsPerOp > 4.1 {
					t.Errorf("%s: %.3f task-path round trips per onceq task, want 2..4", g.Name, r.TaskPathTripsPerOp)
				}
			case g.Unit == "tasks" && r.Side == sideBare:
				if r.TaskPathTripsPerOp < 1.9 || r.TaskPathTripsPerOp > 2.1 {
					t.Errorf("%s: %.3f task-path round trips per asynq task, want about 2", g.Name, r.TaskPathTripsPerOp)
				}
			case g.Unit == "jobs":
				endToEnd++
				if r.ops != 2*200 {
					t.Errorf("%s %s: %d jobs, want 2 rounds of 200", g.Name, r.Side, r.ops)
				}
			case strings.HasPrefix(g.Name, "enqueue") && (r.Side == enqDefault || r.Side == enqPlainID || r.Side == enqPlainHdr ||
				r.Side == enqWindow || r.Side == enqRate): // a rule is taken in the insert's script
				if r.trips != r.ops {
					t.Errorf("%s %s: %d round trips for %d enqueues, want exactly 1 each", g.Name, r.Side, r.trips, r.ops)
				}
			}
		}
	}
	if processed != 3 {
		t.Errorf("%d processing layouts with an onceq side, want 3 (in-process, two subprocesses, the realistic handler)", processed)
	}
	if endToEnd != 6 {
		t.Errorf("%d end-to-end sides, want 6 (asynq, asynq+id, onceq; no-op and realistic handler)", endToEnd)
	}
	if realistic != 2 {
		t.Errorf("%d groups with the realistic handler, want 2 (processing c=10, end to end)", realistic)
	}
	// onceq keeps the record alone; a type shown on the dashboard keeps
	// the completed task (without its payload) and its entry as well.
	if m := rep.Memory; m == nil || m.PayloadBytes != 200 || m.ResultBytes == 0 || m.RecordBytes <= float64(m.ResultBytes) ||
		m.TaskBytes != 0 || m.CompletedEntryBytes != 0 || m.ShownRecordBytes <= float64(m.ResultBytes) || m.ShownTaskBytes <= 0 ||
		m.ShownEntryBytes <= 0 || m.PlainTaskBytes <= float64(m.PayloadBytes) {
		t.Errorf("memory: %+v", rep.Memory)
	}
	// The full record and the compact mark, measured apart; the mark smaller.
	if r := rep.Remembered; r == nil || r.Keys != 20000 || r.FullBytes <= float64(len(memResult)) ||
		r.CompactBytes <= 0 || r.CompactBytes >= r.FullBytes || r.Compact30dBytes <= 0 || !r.Listpack {
		t.Errorf("remembered: %+v", rep.Remembered)
	}
	if withCluster {
		if c := rep.Cluster; c == nil || len(c.Masters) != 3 || c.total() <= 0 || c.BusiestShare() < 1.0/3 ||
			c.TaskPathTripsPerTask < 2 || c.TaskPathTripsPerTask > 2+tripTolerance {
			t.Errorf("cluster: %+v", rep.Cluster)
		}
	}
	// Every target row, by its name, in text, JSON and Markdown.
	md, _ := os.ReadFile(mdPath)
	var decoded Report
	if b, err := os.ReadFile(jsonPath); err != nil || json.Unmarshal(b, &decoded) != nil || len(decoded.Groups) != len(rep.Groups) {
		t.Errorf("json report: %v", err)
	}
	if len(rep.Targets) != len(issueTargets) || len(decoded.Targets) != len(issueTargets) {
		t.Errorf("%d targets (%d in JSON), want %d", len(rep.Targets), len(decoded.Targets), len(issueTargets))
	}
	for i, name := range issueTargets {
		measured := withCluster || !strings.HasPrefix(name, "Cluster")
		if i >= len(rep.Targets) || rep.Targets[i].Name != name || rep.Targets[i].Measured != measured {
			t.Errorf("target %d: want %q, measured %v", i, name, measured)
		} else if measured && rep.Targets[i].Load <= 0 {
			t.Errorf("target %q: no load average", name)
		}
		if i < len(decoded.Targets) && decoded.Targets[i].Name != name {
			t.Errorf("JSON target %d = %q, want %q", i, decoded.Targets[i].Name, name)
		}
		if !strings.Contains(stdout.String(), name) || !strings.Contains(string(md), "| "+name+" |") {
			t.Errorf("target %q missing from the printed report or the Markdown", name)
		}
	}
	if !strings.Contains(stdout.String(), "load average") || rep.Load.Max <= 0 {
		t.Errorf("no load average: %+v", rep.Load)
	}
	if c, ok := rep.comparison("process 1 server c=10", sideOnceq, sideBare); !ok || c.Q1 > c.Median || c.Median > c.Q3 {
		t.Errorf("onceq/asynq comparison %+v, want Q1 <= median <= Q3", c)
	}

	// The Markdown is regenerated from the saved JSON alone, byte for byte.
	again := filepath.Join(t.TempDir(), "again.md")
	if _, err := run(ctx, []string{"-from", jsonPath, "-markdown", again}, io.Discard, io.Discard, worker); err != nil {
		t.Fatal(err)
	}
	if md2, _ := os.ReadFile(again); len(md) == 0 || !bytes.Equal(md, md2) {
		t.Errorf("markdown from -from differs:\n%s\n---\n%s", md, md2)
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

// issueTargets are the rows of issue 41's Targets table, the same bars
// with the realistic handler, then issue 24's rows that stand, in order: a
// renamed or dropped row fails the test.
var issueTargets = []string{
	"end to end with 20 % repeats / asynq+id",
	"end to end with 20 % repeats / bare asynq",
	"processing / asynq+id",
	"processing, 1 server c=10 / bare asynq",
	"enqueue / asynq+id, g = 1 / 8 / 32",
	"added CPU per task (Go + Redis)",
	"end to end, realistic handler / asynq+id",
	"processing, realistic handler / asynq+id",
	"processing, 2 processes / bare asynq",
	"round trips per task, happy path",
	"refused duplicate, described / first insert",
	"Redis memory per remembered job, 200 B payload",
	"Redis memory per remembered key once its result expired (compact mark)",
	"Cluster, 3 masters, one job type: share of commands on the busiest master",
	"Cluster: round trips per task, happy path",
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	v := []float64{0.9, 0.7, 0.8, 1.0, 0.6}
	for q, want := range map[float64]float64{0: 0.6, 0.25: 0.7, 0.5: 0.8, 0.75: 0.9, 1: 1.0} {
		if got := quantile(v, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", v, q, got, want)
		}
	}
	if got := quantile([]float64{1, 2}, 0.5); got != 1.5 {
		t.Errorf("median of 1, 2 = %v, want 1.5", got)
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
}

// The join phase pairs a Server with asynq's server plus the Middleware,
// over loopback and through the delaying proxy, and the proxy's delay shows
// in when handlers start.
func TestJoinPhase(t *testing.T) {
	srv := redistest.Start(t)
	var stdout, stderr bytes.Buffer
	rep, err := run(context.Background(), []string{"-phases", "join", "-n", "100", "-rounds", "1", "-conc", "10",
		"-two-conc", "", "-delay", "2ms", "-redis-url", "redis://" + srv.Addr + "/0"}, &stdout, &stderr, nil)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	if len(rep.Join) != 2 || rep.Join[0].Network != "loopback" || !strings.HasPrefix(rep.Join[1].Network, "proxy +2ms") {
		t.Fatalf("join rows %+v, want loopback and the proxy", rep.Join)
	}
	for _, r := range rep.Join {
		if r.JoinedRate <= 0 || r.PlainRate <= 0 || r.JoinedCPU <= 0 || r.PlainCPU <= 0 {
			t.Errorf("%+v: a side unmeasured", r)
		}
	}
	if rep.Join[1].P50Saved <= rep.Join[0].P50Saved {
		t.Errorf("the claim's own round trip saved %.2f ms through a 2 ms proxy, %.2f ms on loopback: want more through the proxy",
			rep.Join[1].P50Saved, rep.Join[0].P50Saved)
	}
	if !strings.Contains(stdout.String(), "| network | c | tasks/s joined") {
		t.Errorf("no join table in the report:\n%s", stdout.String())
	}
}
