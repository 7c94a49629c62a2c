package dedup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

type optNote struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// A job's own asynq options go with every insert of it: its replacement
// under the replace and debounce policies, and its next incarnation after
// the first failed for good. Options given to Enqueue add to the job's,
// the later winning; Queue moves the job.
func TestJobOptionsSurviveRebuilds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	p := oncetest.NewProducer(t, rdb, nil, dedup.ProducerOptions{})
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { insp.Close() })
	check := func(what string, o dedup.Outcome, timeout time.Duration, retries int) {
		t.Helper()
		info, err := insp.GetTaskInfo(o.Queue, o.TaskID)
		if err != nil || info.Timeout != timeout || info.MaxRetry != retries {
			t.Errorf("%s: task %+v %v; want timeout %s, %d retries", what, info, err, timeout, retries)
		}
	}
	opts := []asynq.Option{asynq.Timeout(42 * time.Second), asynq.MaxRetry(0), asynq.ProcessIn(time.Hour)}
	for _, policy := range []dedup.Repeat{{Policy: "replace"}, {Policy: "debounce", Delay: time.Minute, MaxWait: time.Hour}} {
		kind := dedup.Define(dedup.Spec[optNote]{Type: "opt:" + policy.Policy, ID: func(n optNote) string { return n.ID }, Repeat: policy})
		first, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-1", Text: "a"}, opts...))
		if err != nil || first.Decision != dedup.Enqueued {
			t.Fatalf("%s first: %+v %v", policy.Policy, first, err)
		}
		check(policy.Policy+" first", first, 42*time.Second, 0)
		second, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-1", Text: "b"}, opts...))
		if err != nil || second.Decision != dedup.Enqueued || !second.Replaced {
			t.Fatalf("%s repeat: %+v %v, want it replaced", policy.Policy, second, err)
		}
		check(policy.Policy+" replacement", second, 42*time.Second, 0)
	}

	// A next incarnation, after the first was archived.
	kind := dedup.Define(dedup.Spec[optNote]{Type: "opt:incarnation", ID: func(n optNote) string { return n.ID }})
	first, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-1"}, opts...))
	if err != nil || first.Decision != dedup.Enqueued {
		t.Fatalf("incarnation first: %+v %v", first, err)
	}
	if err := insp.ArchiveTask(first.Queue, first.TaskID); err != nil {
		t.Fatal(err)
	}
	next, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-1"}, opts...))
	if err != nil || next.Decision != dedup.Enqueued || next.Incarnation != 2 {
		t.Fatalf("after the archive: %+v %v, want incarnation 2", next, err)
	}
	check("incarnation 2", next, 42*time.Second, 0)

	// Enqueue's options add to the job's; Queue moves it.
	moved, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-2"}, opts...), asynq.MaxRetry(3), asynq.Queue("elsewhere"))
	if err != nil || moved.Queue != "elsewhere" {
		t.Fatalf("moved: %+v %v", moved, err)
	}
	check("options at Enqueue", moved, 42*time.Second, 3)
	if st, err := p.Status(ctx, kind.Job(optNote{ID: "n-2"}).Key); err != nil || st.State != dedup.StatusScheduled {
		t.Errorf("status of the moved job: %+v %v, want scheduled", st, err)
	}

	// The options the library owns are refused, and nothing is enqueued.
	for name, o := range map[string]asynq.Option{"TaskID": asynq.TaskID("x"), "Unique": asynq.Unique(time.Hour), "Group": asynq.Group("g")} {
		out, err := p.Enqueue(ctx, kind.Job(optNote{ID: "n-3"}, o))
		if err == nil || !strings.Contains(err.Error(), "asynq."+name) || out.Decision != "" {
			t.Errorf("asynq.%s: %+v %v, want refused by name", name, out, err)
		}
	}
}
