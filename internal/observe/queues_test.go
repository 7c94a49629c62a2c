package observe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/observe"
)

// onceq_blocked_keys counts the archived tasks whose type keeps failed keys:
// an archived task of any other type has freed its key. Every configured
// queue has a series from the start.
func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	client := asynq.NewClientFromRedisClient(rdb)
	reg := prometheus.NewRegistry()
	reg.MustRegister(observe.NewQueueSizes(insp, []string{"audit:file"}, "critical", "default"))
	gauge := func(want string) {
		t.Helper()
		exp := `
# HELP onceq_blocked_keys Archived tasks of each queue that still refuse their key (their type keeps failed keys).
# TYPE onceq_blocked_keys gauge
` + want
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "onceq_blocked_keys"); err != nil {
			t.Fatal(err)
		}
	}
	gauge(`onceq_blocked_keys{queue="critical"} 0
onceq_blocked_keys{queue="default"} 0
`)

	archive := func(typ, id string) {
		t.Helper()
		if _, err := client.EnqueueContext(context.Background(), asynq.NewTask(typ, []byte(`{}`)),
			asynq.Queue("default"), asynq.TaskID(id), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := insp.ArchiveTask("default", id); err != nil {
			t.Fatal(err)
		}
	}
	archive("payment:charge", "payment:charge=pmt~1")
	gauge(`onceq_blocked_keys{queue="critical"} 0
onceq_blocked_keys{queue="default"} 0
`)
	archive("audit:file", "audit:file=a~1")
	gauge(`onceq_blocked_keys{queue="critical"} 0
onceq_blocked_keys{queue="default"} 1
`)
	exp := `
# HELP onceq_queue_size_errors_total Failed reads of queue information.
# TYPE onceq_queue_size_errors_total counter
onceq_queue_size_errors_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "onceq_queue_size_errors_total"); err != nil {
		t.Fatal(err)
	}
}
