package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// Every built-in type the worker completes shows its result in asynqmon's
// own API as the JSON the record holds, not "non-printable bytes" (what
// asynqmon says for an empty result).
func TestDashboardShowsResultsAsJSON(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := newEnv(t, srv.Client(t))
	w := startWorker(t, baseEnv(t, srv.Addr))

	enqueue := e.enqueued(t)
	var jobs []dedup.Job
	for _, j := range []func() (dedup.Job, error){
		func() (dedup.Job, error) {
			return testenv.Job(tasks.Emails.Job(tasks.Email{To: "r@example.com", Subject: "S", Body: "B"}))
		},
		func() (dedup.Job, error) {
			return testenv.Job(tasks.SMSes.Job(tasks.SMS{To: "+4915112345678", Body: "hi"}))
		},
		func() (dedup.Job, error) {
			return testenv.Job(tasks.Webhooks.Job(tasks.Webhook{Source: "crm", EventID: "evt-9", Type: "user.deleted"}))
		},
	} {
		job, _ := enqueue(j())
		jobs = append(jobs, job)
	}
	for _, j := range jobs {
		e.waitState(t, j.Key, dedup.StatusDone)
		e.waitTask(t, j.Queue, j.Key.TaskID(), asynq.TaskStateCompleted)
	}

	body := get(t, "http://"+w.admin+"/monitoring/api/queues/"+tasks.QueueDefault+"/completed_tasks?page=1&page_size=20", http.StatusOK)
	var list struct {
		Tasks []struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Result string `json:"result"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("completed tasks: %v\n%s", err, body)
	}
	results := map[string]string{}
	for _, task := range list.Tasks {
		results[task.ID] = task.Result
	}
	for _, j := range jobs {
		got, ok := results[j.Key.TaskID()]
		var v map[string]any
		if !ok || json.Unmarshal([]byte(got), &v) != nil || len(v) == 0 {
			t.Errorf("%s (%s): dashboard result %q (listed %v), want a JSON object", j.Task.Type(), j.Key, got, ok)
		}
	}
}
