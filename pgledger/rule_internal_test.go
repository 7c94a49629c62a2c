package pgledger

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Every field of a dedup.Rule that decides an enqueue survives the
// outbox: a field added to Rule and not kept here fails this test, as
// OutlastsKey did when it came.
func TestRuleSurvivesTheOutbox(t *testing.T) {
	in := dedup.Rule{Key: dedup.Key{Namespace: "n", ID: "i"}, Window: time.Minute}
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch {
		case f.Name == "Global": // chose the key's scope at build; not the relay's
		case f.Type.Kind() == reflect.Bool:
			v.Field(i).SetBool(true)
		case f.Name != "Key" && f.Name != "Window":
			t.Fatalf("dedup.Rule.%s (%s): decide whether the outbox keeps it", f.Name, f.Type)
		}
	}
	in.Global = false
	if out := ruleOf(&in).rule(); !reflect.DeepEqual(*out, in) {
		t.Fatalf("through the outbox %+v, want %+v", *out, in)
	}
}

// Every exported field of a dedup.Job, and its own asynq options, survive
// the outbox (EnqueueTx's row, then the relay's job): a field added to Job
// and not kept here fails this test.
func TestJobSurvivesTheOutbox(t *testing.T) {
	in := dedup.Job{
		Task: asynq.NewTaskWithHeaders("t:x", []byte(`{}`), map[string]string{"h": "v"}), Key: dedup.Key{Namespace: "t:x", ID: "1"},
		Fingerprint: "fp", Queue: "q", Unique: time.Hour, MaxRetry: 3, KeepFailed: true, WriteResult: true, History: true,
		Repeat: dedup.Repeat{Policy: "debounce", Delay: time.Second, MaxWait: time.Minute},
		Rules:  []*dedup.Rule{{Key: dedup.Key{Namespace: "r", ID: "1"}, Window: time.Minute, Repeats: true}},
	}
	now := time.Now().Round(0)
	deadline := now.Add(2 * time.Hour)
	in = in.With(asynq.ProcessIn(time.Hour), asynq.Timeout(time.Second), asynq.Deadline(deadline), asynq.MaxRetry(0), asynq.Retention(time.Minute))
	v := reflect.ValueOf(in)
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() && f.Name != "Err" && v.Field(i).IsZero() {
			t.Fatalf("set Job.%s in this test, and keep it in the outbox", f.Name)
		}
	}
	pol, err := policyOf(in, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(pol)
	if err != nil {
		t.Fatal(err)
	}
	out, err := outboxRow{key: in.Key.String(), fingerprint: in.Fingerprint, taskType: in.Task.Type(), payload: in.Task.Payload(),
		headers: in.Task.Headers(), queue: in.Queue, policy: b}.job()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(out.Options()), fmt.Sprint([]asynq.Option{asynq.ProcessAt(now.Add(time.Hour)), asynq.Timeout(time.Second),
		asynq.Deadline(deadline), asynq.MaxRetry(0), asynq.Retention(time.Minute)}); got != want {
		t.Errorf("options through the outbox %s, want %s", got, want)
	}
	if out.Task.Type() != in.Task.Type() || string(out.Task.Payload()) != string(in.Task.Payload()) || !reflect.DeepEqual(out.Task.Headers(), in.Task.Headers()) {
		t.Errorf("task through the outbox %v, want %v", out.Task, in.Task)
	}
	out.Task, in.Task = nil, nil
	if o, i := withoutOptions(out), withoutOptions(in); !reflect.DeepEqual(o, i) {
		t.Errorf("job through the outbox\n%+v\nwant\n%+v", o, i)
	}
}

// withoutOptions is j's exported fields, for comparing jobs whose options
// were compared apart.
func withoutOptions(j dedup.Job) map[string]any {
	m := map[string]any{}
	v := reflect.ValueOf(j)
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() {
			m[f.Name] = v.Field(i).Interface()
		}
	}
	return m
}
