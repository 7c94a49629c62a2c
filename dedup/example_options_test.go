package dedup_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// Report is a monthly report's payload.
type Report struct {
	Month string `json:"month"`
}

// A job takes asynq's own options, as asynq's Enqueue does: here a start in
// an hour, a 30 s time-out and no retries. A repeat meets the scheduled job;
// the task id is the job's key, so asynq.TaskID is refused.
func ExampleTyped_Job_options() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	reports := dedup.Define(dedup.Spec[Report]{Type: "report:build", ID: func(r Report) string { return r.Month }})
	job := reports.Job(Report{Month: "2026-12"}, asynq.ProcessIn(time.Hour), asynq.Timeout(30*time.Second), asynq.MaxRetry(0))
	first, _ := producer.Enqueue(ctx, job)
	again, _ := producer.Enqueue(ctx, job)
	fmt.Println(first.Decision, first.State)
	fmt.Println(again.Decision, again.State)

	insp := asynq.NewInspectorFromRedisClient(rdb)
	info, _ := insp.GetTaskInfo(first.Queue, first.TaskID)
	fmt.Println("retries", info.MaxRetry, "timeout", info.Timeout, "in about an hour", time.Until(info.NextProcessAt) > 59*time.Minute)

	_, err = producer.Enqueue(ctx, reports.Job(Report{Month: "2027-01"}), asynq.TaskID("my-own-id"))
	fmt.Println(err)
	// Output:
	// enqueued scheduled
	// duplicate scheduled
	// retries 0 timeout 30s in about an hour true
	// dedup: report:build: asynq.TaskID: the task id is the job's key (report:build=2027~01); choose it with Spec.ID
}
