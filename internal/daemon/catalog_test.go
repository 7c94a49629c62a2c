package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/tasks"
)

// ONCEQ_ON_REPEAT reaches the jobs every binary builds, and a bad value
// stops the start naming the variable.
func TestCatalogOnRepeat(t *testing.T) {
	c, err := Catalog(config.Dedup{OnRepeat: "email:send=replace, scan:file=debounce:2s/10s"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Build(tasks.TypeEmail, []byte(`{"id":"e","to":"a@x.io","subject":"s","body":"b"}`), "", "")
	if err != nil || j.Repeat.Policy != "replace" {
		t.Fatalf("email job repeat %+v (%v), want replace", j.Repeat, err)
	}
	j, err = c.Build(tasks.TypeScan, []byte(`{"path":"a.pdf"}`), "", "")
	if err != nil || j.Repeat != (dedup.Repeat{Policy: "debounce", Delay: 2 * time.Second, MaxWait: 10 * time.Second}) {
		t.Fatalf("scan job repeat %+v (%v), want debounce:2s/10s", j.Repeat, err)
	}
	for _, bad := range []string{"email:send=sometimes", "email:send", "nosuch:type=replace", "scan:file=debounce:10s/2s", "email:send=replace,email:send=reject"} {
		if _, err := Catalog(config.Dedup{OnRepeat: bad}); err == nil || !strings.Contains(err.Error(), "ONCEQ_ON_REPEAT") && !strings.Contains(err.Error(), "repeat policy") {
			t.Errorf("ONCEQ_ON_REPEAT=%s: %v, want an error about the policy", bad, err)
		}
	}
}

// ONCEQ_QUEUE_SHARDS spreads every queue of the catalog's types: jobs land
// in a shard of their type's queue, and a worker serving ONCEQ_QUEUES
// consumes every shard of each; a queue no type uses (low: plain asynq
// code's) is served as it is.
func TestCatalogQueueShards(t *testing.T) {
	c, err := Catalog(config.Dedup{QueueShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range c.Kinds() {
		if len(k.Queues) != 4 || k.Queues[3] != k.Queue+".3" {
			t.Errorf("%s: queues %q, want 4 shards of %s", k.Type, k.Queues, k.Queue)
		}
	}
	j, err := c.Build(tasks.TypePayment, []byte(`{"payment_id":"pmt-1","account":"a","amount":1,"currency":"EUR"}`), "", "")
	if err != nil || !strings.HasPrefix(j.Queue, tasks.QueueCritical+".") {
		t.Fatalf("payment job queue %q (%v), want a shard of critical", j.Queue, err)
	}
	served := c.Served(map[string]int{"critical": 6, "low": 1, "other": 1})
	want := "critical.0 critical.1 critical.2 critical.3 low other"
	if got := strings.Join(served, " "); got != want {
		t.Errorf("served %q, want %q", got, want)
	}
	one, err := Catalog(config.Dedup{QueueShards: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(one.Served(map[string]int{"critical": 6, "default": 3}), " "); got != "critical default" {
		t.Errorf("one shard serves %q, want the queues themselves", got)
	}
}

// ONCEQ_KEEP_COMPLETED=false turns every type's dashboard copy off: no
// result is written to asynq, and a job's task is enqueued without
// retention, so asynq deletes it as it completes.
func TestCatalogKeepCompleted(t *testing.T) {
	rdb := redistest.Client(t)
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, keep := range []bool{true, false} {
		c, err := Catalog(config.Dedup{KeepCompleted: keep, QueueShards: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range c.Kinds() {
			if k.WriteResult != keep {
				t.Errorf("keep %v: %s writes its result to asynq: %v", keep, k.Type, k.WriteResult)
			}
		}
		j, err := c.Build(tasks.TypeEmail, fmt.Appendf(nil, `{"id":"keep-%v","to":"a@x.io","subject":"s","body":"b"}`, keep), "", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := producer.Enqueue(t.Context(), j)
		if err != nil || out.Decision != dedup.Enqueued {
			t.Fatalf("keep %v: enqueue %+v (%v)", keep, out, err)
		}
		want := time.Duration(0)
		if keep {
			want = tasks.DefaultUniqueWindow
		}
		if info, err := insp.GetTaskInfo(out.Queue, out.TaskID); err != nil || info.Retention != want {
			t.Errorf("keep %v: task %+v (%v), want retention %v", keep, info, err, want)
		}
	}
}

// The API's catalog holds each github source's bodies for
// ONCEQ_GITHUB_REPLAY_WINDOW, and no other source's.
func TestAPICatalogGitHubReplay(t *testing.T) {
	c, err := APICatalog(config.API{GitHubReplayWindow: 72 * time.Hour,
		WebhookSchemes: map[string]string{"repo": config.SchemeGitHub, "shop": config.SchemeStripe}})
	if err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]time.Duration{"repo": 72 * time.Hour, "shop": 0} {
		j, err := c.Build(tasks.TypeWebhook, []byte(`{"source":"`+src+`","event_id":"e1","type":"push","body":{"ref":"x"}}`), "", "")
		if err != nil {
			t.Fatal(err)
		}
		var got time.Duration
		for _, r := range j.Rules {
			if r.Key.Namespace == "webhook:replay" && r.OutlastsKey {
				got = r.Window
			}
		}
		if got != want {
			t.Errorf("%s: replay window %v, want %v (rules %v)", src, got, want, j.Rules)
		}
	}
}
