package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

const usage = `usage: producer COMMAND [flags]

commands:
  email    --to ADDR --subject S --body B [--id ID]     enqueue an email
  scan     --path P [--mode malware|full] [--file-id F]  enqueue a file scan
  payment  --payment-id ID --account A --amount MINOR --currency CUR
  batch    < jobs.jsonl   one {"type":..., "payload":{...}, "idempotency_key":...} per line
  status   KEY            did this job run? KEY is namespace/id (the task id)
  serve                   run the HTTP ingest API

Configuration is ONCEQ_* environment variables; "producer --help" lists them.`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage+"\n\nEnvironment variables:")
		return config.Usage(stdout, config.Producer{})
	case "serve":
		return serve(ctx, args, stdout, stderr)
	}
	cfg, err := config.LoadProducer()
	if err != nil {
		return err
	}
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis (%s): %w; start one or set ONCEQ_REDIS_URL", redisWhere(cfg.Redis), err)
	}
	store, err := dedup.NewRedisStore(rdb, dedup.Options{DoneTTL: cfg.DoneTTL, FailedTTL: cfg.FailedTTL})
	if err != nil {
		return err
	}
	p := tasks.NewProducer(rdb, store, tasks.ProducerOptions{UniqueWindow: cfg.UniqueWindow})

	switch cmd {
	case "email", "scan", "payment":
		j, err := jobFromFlags(cmd, args)
		if err != nil {
			return err
		}
		o, err := p.Enqueue(ctx, j)
		if err != nil {
			return err
		}
		printOutcome(stdout, o)
		return nil
	case "batch":
		return batch(ctx, p, stdin, stdout)
	case "status":
		if len(args) != 1 {
			return errors.New("status takes one KEY (namespace/id)")
		}
		st, closeLedger, err := withLedger(ctx, cfg.Postgres, store)
		if err != nil {
			return err
		}
		defer closeLedger()
		return status(ctx, rdb, st, args[0], stdout)
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func redisWhere(r config.Redis) string {
	if r.Configured() {
		return "ONCEQ_REDIS_URL or ONCEQ_REDIS_CLUSTER_NODES"
	}
	return "127.0.0.1:6379, the default"
}

func jobFromFlags(cmd string, args []string) (tasks.Job, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j tasks.Job
	var err error
	switch cmd {
	case "email":
		var e tasks.Email
		fs.StringVar(&e.To, "to", "", "recipient")
		fs.StringVar(&e.Subject, "subject", "", "subject")
		fs.StringVar(&e.Body, "body", "", "body")
		fs.StringVar(&e.ID, "id", "", "business key (default: content hash)")
		if err = fs.Parse(args); err == nil {
			j, err = tasks.NewEmail(e)
		}
	case "scan":
		var s tasks.Scan
		fs.StringVar(&s.Path, "path", "", "file path under the worker's scan root")
		fs.StringVar(&s.Mode, "mode", "malware", "malware or full")
		fs.StringVar(&s.FileID, "file-id", "", "resource id for the 30 s window")
		if err = fs.Parse(args); err == nil {
			j, err = tasks.NewScan(s)
		}
	case "payment":
		var p tasks.Payment
		fs.StringVar(&p.PaymentID, "payment-id", "", "payment id (the idempotency key)")
		fs.StringVar(&p.Account, "account", "", "account")
		fs.Int64Var(&p.Amount, "amount", 0, "amount in minor units (cents)")
		fs.StringVar(&p.Currency, "currency", "", "ISO 4217 currency, e.g. EUR")
		fs.StringVar(&p.Description, "description", "", "description")
		if err = fs.Parse(args); err == nil {
			j, err = tasks.NewPayment(p)
		}
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		return tasks.Job{}, fmt.Errorf("%s: %w", cmd, err)
	}
	return j, nil
}

func printOutcome(w io.Writer, o tasks.Outcome) {
	switch o.Decision {
	case tasks.Enqueued:
		fmt.Fprintf(w, "enqueued %s as task %s on queue %s\n", o.Key, o.TaskID, o.Queue)
	case tasks.Duplicate:
		fmt.Fprintf(w, "duplicate of %s: %s", o.TaskID, o.Reason)
		if o.RetryAfter > 0 {
			fmt.Fprintf(w, " (accepted again in %s)", o.RetryAfter.Round(time.Second))
		}
		if len(o.Result) > 0 {
			fmt.Fprintf(w, "; result %s", o.Result)
		}
		fmt.Fprintln(w)
	case tasks.Throttled:
		fmt.Fprintf(w, "throttled %s: %s; retry in %s\n", o.Key, o.Reason, o.RetryAfter.Round(time.Second))
	}
}

// batchLine is one job of a batch file.
type batchLine struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

func batch(ctx context.Context, p *tasks.Producer, in io.Reader, out io.Writer) error {
	var jobs []tasks.Job
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var bl batchLine
		if err := tasks.Decode([]byte(line), &bl); err != nil {
			return fmt.Errorf("batch line %d: %w", n, err)
		}
		j, err := tasks.JobFor(bl.Type, bl.Payload, bl.IdempotencyKey)
		if err != nil {
			return fmt.Errorf("batch line %d: %w", n, err)
		}
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	// Every line is valid before anything is enqueued: a bad file enqueues nothing.
	r := p.EnqueueBatch(ctx, jobs)
	for i, o := range r.Outcomes {
		if r.Errors[i] != nil {
			fmt.Fprintf(out, "error %s: %v\n", jobs[i].Key, r.Errors[i])
			continue
		}
		printOutcome(out, o)
	}
	fmt.Fprintf(out, "batch: %d enqueued, %d blocked, %d failed\n", r.Enqueued, r.Blocked, r.Failed)
	if r.Failed > 0 {
		return fmt.Errorf("batch: %d jobs failed", r.Failed)
	}
	return nil
}

// jobStatus is what `status` prints: the idempotency record and the asynq task.
type jobStatus struct {
	Key         string     `json:"key"`
	Processed   bool       `json:"processed"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts,omitempty"`
	Result      any        `json:"result,omitempty"`
	Error       string     `json:"error,omitempty"`
	FirstSeen   *time.Time `json:"first_seen,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	TaskState   string     `json:"task_state,omitempty"`
	Queue       string     `json:"queue,omitempty"`
}

func status(ctx context.Context, rdb redis.UniversalClient, store dedup.Store, arg string, out io.Writer) error {
	k, err := dedup.ParseKey(arg)
	if err != nil {
		return err
	}
	rec, err := store.Status(ctx, k)
	if err != nil {
		return err
	}
	s := jobStatus{Key: k.String(), State: string(rec.State), Attempts: rec.Attempts, Error: rec.Error,
		Processed: rec.State == dedup.StateDone}
	if len(rec.Result) > 0 {
		s.Result = json.RawMessage(rec.Result)
		if !json.Valid(rec.Result) {
			s.Result = string(rec.Result)
		}
	}
	if !rec.FirstSeen.IsZero() {
		s.FirstSeen = &rec.FirstSeen
	}
	if !rec.CompletedAt.IsZero() {
		s.CompletedAt = &rec.CompletedAt
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	if queues, err := insp.Queues(); err == nil {
		for _, q := range queues {
			if info, err := insp.GetTaskInfo(q, k.String()); err == nil {
				s.TaskState, s.Queue = info.State.String(), q
				break
			}
		}
	}
	// Not run yet: the task's own state says more than "absent".
	if rec.State == dedup.StateAbsent {
		s.State = "unknown"
		if s.TaskState != "" {
			s.State = s.TaskState
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
