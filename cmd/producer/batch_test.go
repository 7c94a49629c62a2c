package main

import (
	"context"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/redistest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func TestBatchCounts(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := onceq.NewProducer(rdb, store, onceq.ProducerOptions{})
	email := func(id string) onceq.Job {
		j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: id, To: "a@example.com", Subject: id, Body: "."}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	r := enqueueBatch(context.Background(), p, []onceq.Job{email("email-welcome-1"), email("email-welcome-1"), email("email-report-1")})
	if r.Enqueued != 2 || r.Blocked != 1 || r.Failed != 0 || r.Outcomes[1].Decision != onceq.Duplicate {
		t.Fatalf("batch: %+v", r)
	}
}
