package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/internal/observe"
	"github.com/onceq/onceq/internal/version"
	"github.com/onceq/onceq/tasks"
)

// hooks let tests shorten asynq's retry back-off and learn the admin address;
// main leaves them zero.
type hooks struct {
	retryDelay       asynq.RetryDelayFunc
	env              map[string]string // the configuration instead of the process environment
	delayedTaskCheck time.Duration     // asynq's DelayedTaskCheckInterval; 0: asynq's 5s
	defaultRedisAddr string            // instead of 127.0.0.1:6379 when Redis is not configured
	ready            func(adminAddr string)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, stdout, stderr, hooks{})
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, h hooks) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
		fmt.Fprintln(stdout, "onceq worker: runs asynq tasks once in effect. Environment variables:")
		return config.Usage(stdout, config.Worker{})
	}
	if slices.Contains(args, "--version") || slices.Contains(args, "version") {
		fmt.Fprintln(stdout, "worker", version.String())
		return nil
	}
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q (configuration is ONCEQ_* variables; see --help)", args)
	}
	env := h.env
	if env == nil {
		env = config.Environ()
	}
	cfg, err := config.LoadWorkerFrom(env)
	if err != nil {
		return err
	}
	log, flush, err := daemon.Logger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer flush()

	d, err := daemon.New(daemon.Options{
		Name: "worker", Redis: cfg.Redis, Embedded: cfg.Embedded == config.EmbeddedAuto, DefaultAddr: h.defaultRedisAddr,
		RefuseEviction: cfg.MaxmemoryPolicy == config.MaxmemoryRefuse, Log: log,
	})
	if err != nil {
		return err
	}
	defer d.Shutdown(5 * time.Second) // on early returns; a no-op after the drain below
	rdb := d.Redis
	dash, err := admin.Dashboard(rdb, cfg.DashboardReadOnly)
	if err != nil {
		return err
	}
	adm, err := d.Listen(cfg.Admin, http.NewServeMux(), dash)
	if err != nil {
		return err
	}
	if err := d.WaitRedis(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before Redis came
		}
		return err
	}

	catalog, err := daemon.Catalog(cfg.Dedup)
	if err != nil {
		return err
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	d.Registry.MustRegister(observe.NewQueueSizes(insp, catalog.KeepFailed(), catalog.Served(cfg.Queues)...))
	metrics := d.Metrics
	metrics.Zero("worker", typeNames(catalog))
	store, err := dedup.NewRedisStore(rdb, storage.Options{
		DoneTTL: cfg.DoneTTL, ResultTTL: cfg.ResultTTL, FailedTTL: cfg.FailedTTL, MaxResultBytes: cfg.MaxResultBytes,
		Observer: metrics.Observer(log, "worker"),
	})
	if err != nil {
		return err
	}
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{Catalog: catalog.Catalog,
		Observer: metrics.Observer(log, "producer"), Trace: d.Tracing.Enqueue()})
	if err != nil {
		return err
	}
	deps, closeDeps, err := buildDeps(cfg, log, producer, d.Tracing)
	if err != nil {
		return err
	}
	d.OnStop("downstreams", func(context.Context) error { closeDeps(); return nil })
	ledger, closeLedger, err := openLedger(cfg, log, metrics.Observer(log, "worker"), d)
	if err != nil {
		return err
	}
	d.OnStop("postgres ledger", func(context.Context) error { closeLedger(); return nil })
	deps.Ledger = ledger
	if cfg.Outbox == config.OutboxOn {
		stopRelay, err := startRelay(ledger, producer, metrics.Observer(log, "relay"), log)
		if err != nil {
			return err
		}
		d.OnStop("outbox relay", func(context.Context) error { stopRelay(); return nil })
	}

	served, err := catalog.On(cfg.Queues) // the types on other queues are other workers'
	if err != nil {
		return err
	}
	srv, err := dedup.NewServer(rdb, store, asynq.Config{
		Concurrency:              cfg.Concurrency,
		Queues:                   cfg.Queues,
		StrictPriority:           cfg.StrictPriority,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		DelayedTaskCheckInterval: h.delayedTaskCheck,
		RetryDelayFunc:           h.retryDelay,
		Logger:                   observe.AsynqLogger{S: log.Named("asynq").Sugar()},
		LogLevel:                 asynqLevel(cfg.Log.Level),
	}, dedup.MiddlewareOptions{Lease: cfg.Lease, Liveness: liveness(cfg.Liveness),
		Catalog: served, Observer: metrics.Observer(log, "worker"), Trace: d.Tracing.Deliver(insp)})
	if err != nil {
		return err
	}
	mux := asynq.NewServeMux()
	mux.Use(metrics.HandlerDuration, observe.TaskLog(log.Named("task"), cfg.TaskLog))
	catalog.Register(mux, deps)
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("start asynq server: %w", err)
	}
	// Stops fetching, waits up to ShutdownTimeout for handlers, then
	// releases the claims it cut off.
	d.OnStop("asynq server", srv.Shutdown)
	d.SetReady(func() error {
		if err := srv.Liveness(); err != nil {
			return fmt.Errorf("%w: %w", admin.ErrNoLiveness, err)
		}
		return nil
	})
	log.Info("worker started",
		zap.String("admin", "http://"+adm.Addr()), zap.String("dashboard", "http://"+adm.Addr()+"/monitoring/"),
		zap.String("redis", d.Where), zap.Any("queues", cfg.Queues), zap.Int("shards", cfg.QueueShards),
		zap.Int("concurrency", cfg.Concurrency),
		zap.Any("config", cfg.Redacted()))
	if h.ready != nil {
		h.ready(adm.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", zap.NamedError("reason", context.Cause(ctx)), zap.Duration("shutdown_timeout", cfg.ShutdownTimeout))
	d.Shutdown(5 * time.Second)
	log.Info("stopped")
	return nil
}

func asynqLevel(l string) asynq.LogLevel {
	switch l {
	case "debug":
		return asynq.DebugLevel
	case "warn":
		return asynq.WarnLevel
	case "error":
		return asynq.ErrorLevel
	}
	return asynq.InfoLevel
}

// typeNames are the catalog's task types, sorted.
func typeNames(c *tasks.Catalog) []string {
	var ts []string
	for _, k := range c.Kinds() {
		ts = append(ts, k.Type)
	}
	return ts
}

// liveness is ONCEQ_LIVENESS as the library spells it: 0 is off.
func liveness(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
