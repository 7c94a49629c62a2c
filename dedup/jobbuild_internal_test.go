package dedup

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/hibiken/asynq"
)

// The JSON v2 module words its errors "cannot" or "unable to" at random
// per process; onceq's messages read the same on every run (the examples
// and docs print them).
func TestStableMessage(t *testing.T) {
	for in, want := range map[string]string{
		`json: unable to unmarshal JSON string into Go T: unknown object member name "x"`: `json: cannot unmarshal JSON string into Go T: unknown object member name "x"`,
		`json: cannot unmarshal JSON string into Go T`:                                    `json: cannot unmarshal JSON string into Go T`,
		`jsontext: invalid character`:                                                     `jsontext: invalid character`,
	} {
		if got := stableMessage(errors.New(in)); got != want {
			t.Errorf("stableMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// newJob builds the lean task with the Job; leanTask hands it out only
// while the Job still holds what it was built from, and otherwise builds
// what it always did.
func TestLeanTaskBuiltWithJob(t *testing.T) {
	build := func() Job {
		j := benchMailKind.Job(benchMailP)
		if j.Err != nil || j.lean.task == nil {
			t.Fatalf("job %+v: no lean task", j)
		}
		return j
	}
	rebuilt := func(j Job) map[string]string { // what leanTask made before the cache
		h := maps.Clone(j.Task.Headers())
		delete(h, headerKey)
		return h
	}
	check := func(name string, j Job, wantCached bool) {
		t.Helper()
		got := leanTask(j, j.Key.String())
		if cached := got == j.lean.task; cached != wantCached {
			t.Errorf("%s: cached lean task %v, want %v", name, cached, wantCached)
		}
		if got.Type() != j.Task.Type() || !bytes.Equal(got.Payload(), j.Task.Payload()) || !maps.Equal(got.Headers(), rebuilt(j)) {
			t.Errorf("%s: lean task %s %q %v, want %s %q %v", name, got.Type(), got.Payload(), got.Headers(), j.Task.Type(), j.Task.Payload(), rebuilt(j))
		}
	}
	j := build()
	check("as built", j, true)
	if h := j.Task.Headers(); h[headerKey] != j.Key.String() || h[headerFingerprint] != j.Fingerprint || len(h) != 2 {
		t.Errorf("the Job's task keeps its key and fingerprint headers: %v", h)
	}
	j = build()
	j.Task = asynq.NewTaskWithHeaders(j.Task.Type(), []byte(`{"id":"other"}`), j.Task.Headers())
	check("another task", j, false)
	j = build()
	j.Task.Headers()["traceparent"] = "00-x"
	check("a header added in place", j, false)
	j = build()
	j.Task.Headers()[headerFingerprint] = "changed"
	check("a header changed in place", j, false)
	j = build()
	j.Key.ID = "other"
	if got := leanTask(j, j.Key.String()); got != j.Task {
		t.Errorf("a Job whose key no longer matches its task's header is sent as is, got %v", got.Headers())
	}
	j = build()
	if got := leanTask(j, "bench:mail/other"); got != j.Task {
		t.Errorf("another holder: the Job's task as is, got %v", got.Headers())
	}
}

// marshal writes what encoding/json's Encoder writes without HTML
// escaping, and its pooled buffer never leaks into a returned payload.
func TestMarshalPooled(t *testing.T) {
	a, err := marshal(map[string]string{"b": "<x> & y"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshal(benchMailP)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != `{"b":"<x> & y"}` || string(b) != string(benchMailJSON) {
		t.Errorf("marshal = %s, %s", a, b)
	}
	if _, err := marshal(func() {}); err == nil {
		t.Error("marshal of a func: no error")
	}
	if c, _ := marshal(1); string(c) != "1" || string(a) != `{"b":"<x> & y"}` {
		t.Errorf("a later marshal changed an earlier payload: %s, %s", a, c)
	}
}
