package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/internal/observe/tracing"
	"github.com/onceq/onceq/internal/version"
	"github.com/onceq/onceq/tasks"
)

const usage = `usage: producer COMMAND [flags]     (producer COMMAND --help lists a command's flags)

commands:
  email    --to ADDR --subject S (--body B | --body-file PATH|-) [--id ID]
  scan     --path P [--mode malware|full] [--file-id F]
  payment  --payment-id ID --account A --amount MINOR --currency CUR [--description D]
  enqueue  TYPE [JSON|-] [--key K]   any task type of the catalog, payload as JSON (- or none: stdin)
  batch    < jobs.jsonl   one {"type":..., "payload":{...}, "idempotency_key":...} per line
  status   [--wait D] KEY did this job run? KEY is namespace/id or its task id
  reset    [--finish-running] KEY   operators: free KEY at once (record, windows, task)
  purge    TYPE           operators: free every key of TYPE and delete its waiting tasks
  history  KEY            why was it skipped? the key's last decisions, newest first
  checkout < orders.jsonl  demo: each {"order_id","account","amount","currency"} line commits the
                          order row and its payment job in one Postgres transaction (the outbox)
  relay                   move jobs committed to the Postgres outbox into asynq, until stopped
  serve                   run the HTTP ingest API
  version                 print the version (also --version)

exit codes:
  0 enqueued (batch: no line failed and none conflicted)   1 error
  2 usage (unknown command or flag, bad arguments, a payload the catalog refuses)
  3 duplicate   4 throttled   5 conflict (the key was accepted before with other content)
  6 reset refused: the key's job is running (--finish-running lets it finish unrecorded)

Configuration is ONCEQ_* environment variables (producer --help lists them all): serve reads
every one; the other commands those of Redis, logs, dedup windows and Postgres.`

// Exit codes; usage above and docs/tasks.md document them.
const (
	exitError     = 1
	exitUsage     = 2
	exitDuplicate = 3
	exitThrottled = 4
	exitConflict  = 5
	exitRunning   = 6
)

// exitErr ends the process with code. An empty err means the message was
// already printed (an outcome such as a duplicate).
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitErr) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitErr{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// exitCode maps run's error to the process exit code. A payload the
// catalog refuses is bad input, like a bad flag: nothing was enqueued, and
// only a corrected command can succeed.
func exitCode(err error) int {
	var e *exitErr
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, dedup.ErrInvalid):
		return exitUsage
	}
	return exitError
}

// commands that enqueue: each parses its flags into a payload before
// anything reads the environment or touches Redis.
var enqueuers = map[string]func(args []string, stdin io.Reader, stdout io.Writer) (spec, error){
	"email":   emailFlags,
	"scan":    scanFlags,
	"payment": paymentFlags,
	"enqueue": enqueueArgs,
}

var commandNames = []string{"batch", "checkout", "email", "enqueue", "history", "payment", "purge", "relay", "reset", "scan", "serve", "status", "version"}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return usageErr("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage+"\n\nEnvironment variables:")
		return config.Usage(stdout, config.API{}) // serve's: a superset of the other commands'
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, "producer", version.String())
		return nil
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "checkout":
		return checkout(ctx, args, stdin, stdout)
	case "relay":
		return relay(ctx, args, stdout, stderr)
	case "batch", "status", "history":
		return withProducer(ctx, cmd, args, stdin, stdout)
	case "reset", "purge":
		return operate(ctx, cmd, args, stdout)
	}
	parse, ok := enqueuers[cmd]
	if !ok {
		return usageErr("unknown command %q; commands: %s (see producer --help)", cmd, strings.Join(commandNames, ", "))
	}
	sp, err := parse(args, stdin, stdout)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, catalog, err := load()
	if err != nil {
		return err
	}
	j, err := catalog.Build(sp.typ, sp.payload, sp.key, "")
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return connected(ctx, cfg, catalog, func(p *dedup.Producer, _ redis.UniversalClient) error {
		o, err := p.Enqueue(dedup.WithSource(ctx, "cli"), j)
		if err != nil {
			return err
		}
		printOutcome(stdout, o)
		return outcomeErr(o)
	})
}

// withProducer runs batch, status and history, whose arguments need no
// catalog to parse.
func withProducer(ctx context.Context, cmd string, args []string, stdin io.Reader, stdout io.Writer) error {
	if slices.ContainsFunc(args, isHelp) {
		fmt.Fprintln(stdout, commandHelp[cmd])
		return nil
	}
	var wait time.Duration
	if cmd == "status" {
		fs := flag.NewFlagSet("status", flag.ContinueOnError)
		fs.DurationVar(&wait, "wait", 0, "wait up to this long for the job to be done or failed (e.g. 10s)")
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); err != nil {
			return usageErr("status: %v (see producer status --help)", err)
		}
		args = fs.Args()
	}
	switch {
	case cmd != "batch" && len(args) != 1:
		return usageErr("%s takes one KEY (namespace/id, or its task id), after its flags", cmd)
	case cmd == "batch" && len(args) != 0:
		return usageErr("batch takes no arguments; it reads JSON lines from stdin")
	}
	var key dedup.Key
	if cmd != "batch" {
		var err error
		if key, err = dedup.ParseKey(args[0]); err != nil {
			return &exitErr{code: exitUsage, err: err}
		}
	}
	cfg, catalog, err := load()
	if err != nil {
		return err
	}
	if cmd != "batch" {
		if !slices.ContainsFunc(catalog.Kinds(), func(k *dedup.Kind) bool { return k.Type == key.Namespace }) {
			return usageErr("%s: no task type %q; the types are %s", cmd, key.Namespace, strings.Join(typeNames(), ", "))
		}
		return connected(ctx, cfg, catalog, func(p *dedup.Producer, _ redis.UniversalClient) error {
			if cmd == "history" {
				return history(ctx, p, key, stdout)
			}
			return status(ctx, p, key, wait, stdout)
		})
	}
	jobs, err := readBatch(catalog, stdin)
	if err != nil {
		return err
	}
	return connected(ctx, cfg, catalog, func(p *dedup.Producer, _ redis.UniversalClient) error {
		return batch(ctx, p, jobs, stdout)
	})
}

var commandHelp = map[string]string{
	"batch": "usage: producer batch < jobs.jsonl\n\nOne JSON object per line: {\"type\":\"email:send\",\"payload\":{...},\"idempotency_key\":\"...\"}.\n" +
		"Blank lines and lines starting with # are skipped. Every line is checked before anything is\n" +
		"enqueued; an error names its line. Exit 0 unless a line is refused (2), failed (1) or conflicted (5).",
	"status": "usage: producer status [--wait D] KEY\n\nKEY is namespace/id, or the task id the enqueue commands print.\n" +
		"--wait D waits up to D (10s, 1m) for the job to be done or failed, then prints where it is.\n" +
		"States: pending, scheduled, running, retry, done, failed, archived, unknown, and outbox\n" +
		"(committed to the Postgres outbox, not yet relayed). \"history\" counts the key's decisions\n" +
		"that producer history KEY lists.",
	"history": "usage: producer history KEY\n\nKEY is namespace/id, or the task id the enqueue commands print.\n" +
		"Prints the key's last decisions (at most 32), newest first, one JSON line each: when, the way\n" +
		"in (cli, batch, library, http:<client>, webhook:<source>, worker), the decision, its reason,\n" +
		"the task id and the incarnation. Kept while the key is remembered; none: exit 0, no lines.",
	"reset": "usage: producer reset [--finish-running] KEY\n\nFrees KEY (namespace/id, or its task id) at once: its record, successor, rule windows and\n" +
		"task go in one step; a pending, scheduled or retrying job is cancelled. The key's next job is a\n" +
		"new incarnation (a new downstream key). A running job refuses it (exit 6) unless\n" +
		"--finish-running: then the run finishes and records nothing. Logged at warn.",
	"purge": "usage: producer purge TYPE\n\nFrees every key of task type TYPE and deletes its tasks in every state but running (those\n" +
		"finish and record nothing), in batches of 500. Stop the type's producers first. Logged at warn.",
	"checkout": "usage: producer checkout < orders.jsonl\n\nOne JSON object per line: {\"order_id\":\"ord-1\",\"account\":\"acct-1\",\"amount\":4200,\"currency\":\"EUR\"}.\n" +
		"Each line is one transaction that writes the order to shop_orders and its payment:charge job\n" +
		"(payment id pay-<order_id>) to the outbox: the payment exists if and only if the order commits.\n" +
		"Needs ONCEQ_POSTGRES_URL, not Redis; a relay enqueues the payments. Exit 3 if an order was placed before.",
	"relay": "usage: producer relay\n\nMoves jobs committed with pgledger.EnqueueTx from the Postgres outbox into asynq until\n" +
		"SIGTERM; any number of relays (and workers with ONCEQ_OUTBOX=on) run side by side.\n" +
		"Needs ONCEQ_POSTGRES_URL and Redis.",
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

// load reads the configuration and builds the catalog under its windows.
func load() (config.Producer, *tasks.Catalog, error) {
	cfg, err := config.LoadProducer()
	if err != nil {
		return cfg, nil, err
	}
	catalog, err := daemon.Catalog(cfg.Dedup)
	return cfg, catalog, err
}

// connected runs f with a Producer on the configured Redis; the catalog
// tells its Status which queue (shard) a key's task is in.
func connected(ctx context.Context, cfg config.Producer, catalog *tasks.Catalog, f func(*dedup.Producer, redis.UniversalClient) error) error {
	// go-redis's own lines go through a logger at ONCEQ_LOG_LEVEL, where
	// they are debug: the command's error says what went wrong.
	_, done, err := daemon.Logger(cfg.Log, os.Stderr)
	if err != nil {
		return err
	}
	defer done()
	rdb, err := daemon.Client(cfg.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis (%s): %w; start one or set ONCEQ_REDIS_URL", redisWhere(cfg.Redis), err)
	}
	store, err := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: cfg.DoneTTL, ResultTTL: cfg.ResultTTL, FailedTTL: cfg.FailedTTL})
	if err != nil {
		return err
	}
	// Status reads consult the Postgres ledger, when there is one.
	st, ledger, err := withLedger(cfg.Postgres, store)
	if err != nil {
		return err
	}
	if ledger != nil {
		defer ledger.Close()
	}
	tr, err := tracing.New(ctx, tracing.Options{Service: "onceq-producer"})
	if err != nil {
		return err
	}
	defer func() {
		// The spans leave before the process does, or not at all: a
		// collector that does not answer must not hold the command long.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tr.Shutdown(sctx)
	}()
	p, err := dedup.NewProducer(rdb, st, dedup.ProducerOptions{Catalog: catalog.Catalog, Trace: tr.Enqueue()})
	if err != nil {
		return err
	}
	return f(p, rdb)
}

func redisWhere(r config.Redis) string {
	if r.Configured() {
		return "ONCEQ_REDIS_URL or ONCEQ_REDIS_CLUSTER_NODES"
	}
	return "127.0.0.1:6379, the default"
}

// outcomeErr is the exit status of one enqueue.
func outcomeErr(o dedup.Outcome) error {
	switch o.Decision {
	case dedup.Duplicate:
		return &exitErr{code: exitDuplicate}
	case dedup.Throttled:
		return &exitErr{code: exitThrottled}
	case dedup.Conflict:
		return &exitErr{code: exitConflict}
	}
	return nil
}
