package main

import (
	"context"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func TestBatchCounts(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	email := func(id string) dedup.Job {
		j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: id, To: "a@example.com", Subject: id, Body: "."}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	r := enqueueBatch(context.Background(), p, []dedup.Job{email("email-welcome-1"), email("email-welcome-1"), email("email-report-1")})
	if r.Enqueued != 2 || r.Blocked != 1 || r.Failed != 0 || r.Outcomes[1].Decision != dedup.Duplicate {
		t.Fatalf("batch: %+v", r)
	}
}
