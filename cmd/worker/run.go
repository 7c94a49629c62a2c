package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/onceq/onceq/admin"
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/observe"
	"github.com/onceq/onceq/tasks"
)

// hooks let tests shorten asynq's retry back-off and learn the admin address;
// main leaves them zero.
type hooks struct {
	retryDelay asynq.RetryDelayFunc
	ready      func(adminAddr string)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, stdout, stderr, hooks{})
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, h hooks) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
		fmt.Fprintln(stdout, "onceq worker: runs asynq tasks once in effect. Environment variables:")
		return config.Usage(stdout, config.Worker{})
	}
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q (configuration is ONCEQ_* variables; see --help)", args)
	}
	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	log, err := observe.NewLogger(cfg.Log.Env, cfg.Log.Level, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()

	rdb, closeRedis, err := connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	if err := checkEviction(ctx, rdb, cfg.MaxmemoryPolicy, log); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := observe.NewMetrics(reg)
	reg.MustRegister(observe.NewQueueSizes(asynq.NewInspectorFromRedisClient(rdb)))

	store, err := dedup.NewRedisStore(rdb, dedup.Options{
		DoneTTL: cfg.DoneTTL, FailedTTL: cfg.FailedTTL, MaxResultBytes: cfg.MaxResultBytes,
		Observer: metrics.Observer(log, "worker"),
	})
	if err != nil {
		return err
	}
	catalog, err := newCatalog(cfg.Dedup)
	if err != nil {
		return err
	}
	mw, err := dedup.NewMiddleware(store, dedup.MiddlewareOptions{
		Lease: cfg.Lease, Types: catalog.TypeOptions(), Observer: metrics.Observer(log, "worker"),
	})
	if err != nil {
		return err
	}
	producer := tasks.NewProducer(rdb, store, tasks.ProducerOptions{Observer: metrics.Observer(log, "producer")})
	deps, closeDeps, err := buildDeps(cfg, log, producer)
	if err != nil {
		mw.Shutdown(ctx)
		return err
	}
	defer closeDeps()
	ledger, closeLedger, err := openLedger(ctx, cfg, log, metrics.Observer(log, "worker"))
	if err != nil {
		mw.Shutdown(ctx)
		return err
	}
	defer closeLedger()
	deps.Ledger = ledger

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:     cfg.Concurrency,
		Queues:          cfg.Queues,
		StrictPriority:  cfg.StrictPriority,
		ShutdownTimeout: cfg.ShutdownTimeout,
		IsFailure:       dedup.IsFailure,
		RetryDelayFunc:  dedup.RetryDelay(h.retryDelay),
		Logger:          observe.AsynqLogger{S: log.Named("asynq").Sugar()},
		LogLevel:        asynqLevel(cfg.Log.Level),
	})
	mux := asynq.NewServeMux()
	mux.Use(mw.Wrap, metrics.HandlerDuration, observe.TaskLog(log.Named("task"), cfg.TaskLog))
	catalog.Register(mux, deps)
	if err := srv.Start(mux); err != nil {
		mw.Shutdown(ctx)
		return fmt.Errorf("start asynq server: %w", err)
	}
	var running atomic.Bool
	running.Store(true)

	routes := http.NewServeMux()
	admin.Routes(routes, admin.Options{
		Token:    cfg.Admin.Token,
		Gatherer: reg,
		Ready: func(ctx context.Context) error {
			if !running.Load() {
				return errors.New("shutting down")
			}
			return rdb.Ping(ctx).Err()
		},
		Dashboard: admin.Dashboard(rdb, cfg.DashboardReadOnly),
	})
	adm, err := admin.Listen(cfg.Admin.Addr, routes)
	if err != nil {
		srv.Shutdown()
		mw.Shutdown(ctx)
		return fmt.Errorf("admin listen: %w", err)
	}
	log.Info("worker started",
		zap.String("admin", "http://"+adm.Addr()), zap.String("dashboard", "http://"+adm.Addr()+"/monitoring/"),
		zap.Any("queues", cfg.Queues), zap.Int("concurrency", cfg.Concurrency), zap.Any("config", cfg.Redacted()))
	if h.ready != nil {
		h.ready(adm.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", zap.Duration("shutdown_timeout", cfg.ShutdownTimeout))
	running.Store(false)
	srv.Shutdown() // stops fetching, waits up to ShutdownTimeout for handlers
	bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := mw.Shutdown(bg); err != nil {
		log.Warn("releasing cut-off claims", zap.Error(err))
	}
	if err := adm.Shutdown(bg); err != nil {
		log.Warn("admin shutdown", zap.Error(err))
	}
	log.Info("stopped")
	return nil
}

// newCatalog is the task catalog under the configured windows.
func newCatalog(d config.Dedup) (*tasks.Catalog, error) {
	return tasks.NewCatalog(tasks.Windows{Unique: d.UniqueWindow, PaymentID: d.PaymentIDWindow,
		PaymentRate: d.PaymentRateWindow, FileScan: d.ScanWindow})
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
