package tasks

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

func TestTaskKey(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"source":"s","event_id":"e","type":"t","data":null,"attempt":2}`)
	derived, _, err := dedup.Derive(TypeWebhook, payload, "s:e", []string{"attempt"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, _ := dedup.NewKey(TypeWebhook, "claimed")
	headers := func(key string) map[string]string { return map[string]string{HeaderKey: key} }
	tests := []struct {
		name string
		ctx  context.Context
		task *asynq.Task
		want string
	}{
		{"middleware's key first", dedup.WithKey(context.Background(), claimed),
			asynq.NewTaskWithHeaders(TypeWebhook, payload, headers("webhook:process/idem")), "webhook:process/claimed"},
		{"then the header", context.Background(),
			asynq.NewTaskWithHeaders(TypeWebhook, payload, headers("webhook:process/idem")), "webhook:process/idem"},
		{"a header of another namespace is ignored", context.Background(),
			asynq.NewTaskWithHeaders(TypeWebhook, payload, headers("payment:charge/pay_1")), derived.String()},
		{"a malformed header is ignored", context.Background(),
			asynq.NewTaskWithHeaders(TypeWebhook, payload, headers("webhook:process/{x}")), derived.String()},
		{"else derived", context.Background(), asynq.NewTask(TypeWebhook, payload), "webhook:process/s:e"},
	}
	for _, tt := range tests {
		k, err := taskKey(tt.ctx, tt.task, "s:e", []string{"attempt"})
		if err != nil || k != tt.want {
			t.Errorf("%s: taskKey = %v, %v; want %s", tt.name, k, err, tt.want)
		}
	}
	if _, err := taskKey(context.Background(), asynq.NewTask(TypeEmail, []byte(`{"to":`)), "", nil); !errors.Is(err, asynq.SkipRetry) {
		t.Errorf("taskKey of a broken payload = %v, want SkipRetry", err)
	}
}

func TestNewJobHeadersMatchDerive(t *testing.T) {
	t.Parallel()
	e := Email{To: "bob@example.com", Subject: "a <b> & c", Body: "x", TraceID: "t"}
	j := mustJob(t)(NewEmail(e))
	k, fp, err := dedup.Derive(TypeEmail, j.Task.Payload(), "", dedup.VolatileFields(e))
	if err != nil || k != j.Key || fp != j.Fingerprint {
		t.Fatalf("Derive on the task payload = %v, %s, %v; want the job's %v, %s", k, fp, err, j.Key, j.Fingerprint)
	}
	if got := string(j.Task.Payload()); got != `{"to":"bob@example.com","subject":"a <b> & c","body":"x","trace_id":"t"}` {
		t.Errorf("payload = %s; want plain JSON without HTML escapes", got)
	}
}
