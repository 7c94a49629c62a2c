package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/daemon"
	"github.com/onceq/onceq/internal/observe"
	"github.com/onceq/onceq/tasks"
)

// serveHooks let tests learn the bound address; serve leaves them zero.
type serveHooks struct {
	ready func(addr string)
}

// shutdownTimeout bounds the drain of requests in flight after ctx ends.
const shutdownTimeout = 10 * time.Second

// serve runs the HTTP ingest API until ctx ends.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return serveWith(ctx, args, stdout, stderr, serveHooks{})
}

func serveWith(ctx context.Context, args []string, stdout, stderr io.Writer, h serveHooks) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
		fmt.Fprintln(stdout, "producer serve: the HTTP ingest API (see package api). Environment variables:")
		return config.Usage(stdout, config.API{})
	}
	if len(args) > 0 {
		return fmt.Errorf("serve: unexpected arguments %q (configuration is ONCEQ_* variables; see --help)", args)
	}
	cfg, err := config.LoadAPI()
	if err != nil {
		return err
	}
	log, flush, err := daemon.Logger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer flush()

	d, err := daemon.New(daemon.Options{Name: "api", Redis: cfg.Redis, Log: log, NoRetries: true})
	if err != nil {
		return err
	}
	defer d.Shutdown(shutdownTimeout) // on early returns; a no-op after the drain below
	rdb, metrics := d.Redis, d.Metrics
	catalog, err := daemon.APICatalog(cfg)
	if err != nil {
		return err
	}
	var types []string
	for _, k := range catalog.Kinds() {
		types = append(types, k.Type)
	}
	metrics.Zero("producer", types)
	metrics.Zero("api", append(types, api.ReplayNamespace))

	// The producer reports its own decisions; an observer here would count
	// each window decision twice.
	jobs, err := dedup.NewRedisStore(rdb, storage.Options{
		DoneTTL: cfg.DoneTTL, ResultTTL: cfg.ResultTTL, FailedTTL: cfg.FailedTTL, MaxResultBytes: cfg.MaxResultBytes,
	})
	if err != nil {
		return err
	}
	// Replays live in a store of their own, whose done TTL is the replay
	// TTL, the stored response kept for all of it (a replay needs it: no
	// compact mark). The API reports its decisions itself (side "api"), so
	// this store has no observer: nothing is counted twice.
	replays, err := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: cfg.ReplayTTL, ResultTTL: cfg.ReplayTTL, FailedTTL: cfg.FailedTTL})
	if err != nil {
		return err
	}
	reads, ledger, err := withLedger(cfg.Postgres, jobs)
	if err != nil {
		return err
	}
	if ledger != nil {
		stopWatch := d.Optional("postgres", tasks.Transactional, func(ctx context.Context) error { return ledger.Pool().Ping(ctx) })
		d.OnStop("postgres ledger", func(context.Context) error { stopWatch(); ledger.Close(); return nil })
	}
	producer, err := dedup.NewProducer(rdb, reads, dedup.ProducerOptions{Catalog: catalog.Catalog,
		Observer: metrics.Observer(log, "producer"), Trace: d.Tracing.Enqueue()})
	if err != nil {
		return err
	}
	opts := api.Options{
		Producer:                producer,
		Catalog:                 catalog,
		WebhookIDFields:         cfg.WebhookIDFields,
		WebhookSchemes:          map[string]api.Scheme{},
		Store:                   replays,
		Redis:                   rdb,
		WebhookSecrets:          cfg.WebhookSecrets,
		WebhookTolerance:        cfg.WebhookTolerance,
		MaxBodyBytes:            cfg.MaxBodyBytes,
		WebhookBodyBudget:       cfg.WebhookBodyBudget,
		WebhookPeerBudget:       cfg.WebhookPeerBudget,
		WebhookFirstByteTimeout: cfg.WebhookFirstByteTimeout,
		WebhookBodyTimeout:      cfg.WebhookBodyTimeout,
		// A replay served from memory must not outlive its record.
		ReplayCacheTTL: min(30*time.Second, cfg.ReplayTTL/2),
		Log:            log,
		Observer:       metrics.Observer(log, "api"),
		Requests:       observe.NewHTTP(d.Registry),
	}
	for src, sc := range cfg.WebhookSchemes {
		opts.WebhookSchemes[src] = api.Scheme(sc)
	}
	for _, c := range cfg.Clients() {
		if c.Name == "" {
			opts.Tokens = append(opts.Tokens, c.Token)
		} else {
			opts.Clients = append(opts.Clients, api.Client{Name: c.Name, Token: c.Token, ReadAll: c.ReadAll, Operator: c.Operator})
		}
	}
	handler, err := api.New(opts)
	if err != nil {
		return err
	}
	// Registered before the http server, so it runs after its shutdown:
	// the writes of answers already sent land before the process exits.
	d.OnStop("api writes", handler.Drain)
	guard, err := api.Authorizer(opts)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	admin.Routes(mux, admin.Options{Guard: guard, Gatherer: d.Registry, Ready: d.Ready, Degraded: d.Degraded, Log: log})
	// Every path but the admin routes is the API's, so that unknown paths
	// are 404 problems too.
	mux.Handle("/", d.Tracing.Handler(handler, "api"))
	// Probes answer from now on, while Redis is still awaited.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w", cfg.Addr, err)
	}
	// admin.Serve bounds slow senders: headers within 5s, a whole request
	// within 30s; the API bounds a webhook body that holds budget to 10s.
	root := http.Handler(mux)
	if len(cfg.Tokens) == 0 { // config allows that on loopback only
		root = admin.Local(mux, cfg.Hosts)
	}
	srv := admin.Serve(api.Listener(ln), api.Problems(root))
	d.OnStop("http server", srv.Shutdown)
	if err := d.WaitRedis(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before Redis came
		}
		return err
	}
	d.SetReady(nil)
	if len(cfg.Tokens) == 0 {
		log.Warn("no ONCEQ_API_TOKENS: the API's non-webhook routes are open to anyone who can reach " + srv.Addr())
	}
	log.Info("api started", zap.String("addr", "http://"+srv.Addr()),
		zap.String("redis", d.Where), zap.Strings("webhook_sources", slices.Sorted(maps.Keys(cfg.WebhookSecrets))), zap.Any("config", cfg.Redacted()))
	if h.ready != nil {
		h.ready(srv.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", zap.NamedError("reason", context.Cause(ctx)), zap.Duration("timeout", shutdownTimeout))
	d.Shutdown(shutdownTimeout)
	log.Info("stopped")
	return nil
}
