package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/observe"
	"github.com/onceq/onceq/internal/observe/tracing"
	"github.com/onceq/onceq/internal/version"
)

// Options configures New.
type Options struct {
	// Name is the process's name in logs ("worker", "api").
	Name string
	// NoRetries: the client never re-sends a command whose reply did not
	// come. A re-sent claim or enqueue looks to Redis like another caller's;
	// the API retries itself, as the same delivery.
	NoRetries bool
	// Redis says which Redis to use; one rule for every daemon.
	Redis config.Redis
	// Embedded lets the daemon start an in-memory Redis when none is
	// configured and nothing answers on the default address. Default: false.
	Embedded bool
	// DefaultAddr replaces 127.0.0.1:6379 when Redis is not configured; for
	// tests. Default: "".
	DefaultAddr string
	// RefuseEviction makes a Redis whose maxmemory-policy is not noeviction
	// an error instead of a warning. Default: false.
	RefuseEviction bool
	// Log receives the start-up and shutdown lines. Required.
	Log *zap.Logger
}

// Daemon is what the worker and `producer serve` share: the Redis client,
// one metrics registry, readiness, the admin server and the ordered shutdown.
type Daemon struct {
	Redis    redis.UniversalClient
	Registry *prometheus.Registry
	Metrics  *observe.Metrics
	// Tracing is nil (off) unless the OTEL_* variables ask for traces.
	Tracing *tracing.Tracing
	// Where is the Redis in use, without credentials.
	Where string

	log      *zap.Logger
	opts     Options
	embedded bool
	notReady atomic.Pointer[error] // why /readyz fails; nil when ready
	checks   atomic.Pointer[func() error]
	mu       sync.Mutex
	stops    []stop
	degraded map[string]degradation // optional dependency -> its task types not ready, and why
}

type stop struct {
	name string
	f    func(context.Context) error
}

// New builds the Redis client (without connecting) and the registry. With
// Embedded and nothing configured or answering, it starts an in-memory Redis
// and says loudly that nothing is durable.
func New(o Options) (*Daemon, error) {
	ro, err := o.Redis.UniversalOptions()
	if err != nil {
		return nil, err
	}
	if !o.Redis.Configured() && o.DefaultAddr != "" {
		ro.Addrs = []string{o.DefaultAddr}
	}
	d := &Daemon{log: o.Log, opts: o, Registry: prometheus.NewRegistry()}
	d.setNotReady(errWaitingForRedis)
	if d.Tracing, err = tracing.New(context.Background(), tracing.Options{Service: "onceq-" + o.Name, Log: o.Log}); err != nil {
		return nil, err
	}
	if d.Tracing != nil {
		// The first stop registered runs last: it flushes the spans of
		// everything that stopped before it.
		d.OnStop("tracing", d.Tracing.Shutdown)
		o.Log.Info("tracing on: spans go over OTLP/HTTP as the OTEL_* variables say")
	}
	if !o.Redis.Configured() && o.Embedded && !answers(ro.Addrs[0]) {
		mr, stopMR, err := startEmbedded(ro.Addrs[0])
		if err != nil {
			return nil, fmt.Errorf("embedded redis on %s: %w", ro.Addrs[0], err)
		}
		o.Log.Warn("no Redis configured and none on " + ro.Addrs[0] +
			": started an IN-MEMORY Redis there. NOTHING IS DURABLE: queued tasks and dedup records die with this process. Set ONCEQ_REDIS_URL for real use.")
		d.embedded = true
		d.OnStop("embedded redis", func(context.Context) error { stopMR(); return nil })
		ro = &redis.UniversalOptions{Addrs: []string{mr.Addr()}}
		o.Redis.MinReplicas = 0 // miniredis has no replicas
	}
	if o.NoRetries {
		ro.MaxRetries = -1
	}
	if d.Redis, err = client(o.Redis, ro); err != nil {
		return nil, err
	}
	d.OnStop("redis client", func(context.Context) error { return d.Redis.Close() })
	d.Where = Where(ro)
	d.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "onceq_redis_up",
			Help: "1 when Redis took the readiness probe's write at scrape time; 0 when it is unreachable or refuses writes."}, d.redisUp))
	d.Metrics = observe.NewMetrics(d.Registry)
	v, c := version.Get()
	d.Metrics.Build(v, c)
	o.Log.Info("starting", zap.String("version", v), zap.String("commit", c))
	o.Log.Info("using redis", zap.String("redis", d.Where), zap.Bool("embedded", d.embedded),
		zap.Int("min_replicas", o.Redis.MinReplicas))
	return d, nil
}

// WaitRedis blocks until Redis answers (retrying with back-off while
// /readyz says "waiting for Redis"), then checks its eviction and
// persistence settings. It fails only when ctx ends or the checks refuse.
func (d *Daemon) WaitRedis(ctx context.Context) error {
	if err := waitRedis(ctx, d.Redis, d.Where, d.log); err != nil {
		return err
	}
	if d.embedded {
		return nil // already warned: nothing is durable
	}
	if n, err := d.Redis.Exists(ctx, embeddedMarker).Result(); err == nil && n == 1 {
		d.log.Warn("redis on " + d.Where + " is a worker's embedded IN-MEMORY Redis: NOTHING IS DURABLE, and it stops with that worker")
		return nil
	}
	return checkRedis(ctx, d.Redis, d.opts.RefuseEviction, d.log)
}

// errWaitingForRedis: the process started but Redis has not answered yet.
var errWaitingForRedis = fmt.Errorf("%w: waiting for Redis", admin.ErrStarting)

func (d *Daemon) setNotReady(why error) { d.notReady.Store(&why) }

// SetReady marks the process ready once its server runs; /readyz then
// reports whether Redis answers, and check's error when it has one (the
// worker's: whether it keeps its liveness key). check may be nil.
func (d *Daemon) SetReady(check func() error) {
	if check != nil {
		d.checks.Store(&check)
	}
	d.notReady.Store(nil)
}

// Ready is /readyz: not before SetReady, not during shutdown, not while
// Redis does not answer, and not while it refuses writes. PING answers on
// a Redis that refuses every write (NOREPLICAS under min-replicas-to-write,
// READONLY on a demoted master, OOM at maxmemory, too few replicas for
// ONCEQ_REDIS_MIN_REPLICAS' WAIT), so the probe writes: one short-lived key.
func (d *Daemon) Ready(ctx context.Context) error {
	if why := d.notReady.Load(); why != nil {
		return *why
	}
	if err := d.probeRedis(ctx); err != nil {
		return err
	}
	if check := d.checks.Load(); check != nil {
		return (*check)()
	}
	return nil
}

// probeRedis writes one short-lived key: Redis answers and takes writes.
func (d *Daemon) probeRedis(ctx context.Context) error {
	err := d.Redis.Set(ctx, readyKey, "1", 10*time.Second).Err()
	var re redis.Error
	if err != nil && (errors.As(err, &re) || errors.Is(err, ErrNotReplicated)) {
		return fmt.Errorf("%w: %w", admin.ErrRefusesWrites, err)
	}
	return err
}

// redisUp is onceq_redis_up at scrape time: the readiness probe's write,
// bounded well inside a scrape's timeout.
func (d *Daemon) redisUp() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if d.probeRedis(ctx) != nil {
		return 0
	}
	return 1
}

// readyKey is what the readiness probe writes; its own hash tag keeps it off
// every queue's slot.
const readyKey = "onceq:{readyz}:probe"

// Listen serves the admin routes (health, readiness, metrics, the dashboard
// when given) and whatever the caller put on mux, on addr, from now on:
// probes answer while Redis is still awaited. It stops last.
// Without a token (config allows that on loopback only) it answers only to
// loopback Host names and cfg.Hosts.
func (d *Daemon) Listen(cfg config.Admin, mux *http.ServeMux, dashboard http.Handler) (*admin.Server, error) {
	admin.Routes(mux, admin.Options{Token: cfg.Token, Gatherer: d.Registry, Ready: d.Ready,
		Degraded: d.Degraded, Log: d.log, Dashboard: dashboard})
	h := http.Handler(mux)
	if cfg.Token == "" {
		h = admin.Local(mux, cfg.Hosts)
	}
	srv, err := admin.Listen(cfg.Addr, h)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", d.opts.Name, cfg.Addr, err)
	}
	d.OnStop("http server", srv.Shutdown)
	return srv, nil
}

// OnStop registers f to run at Shutdown; the last registered runs first, so
// what was started on top of something stops before it.
func (d *Daemon) OnStop(name string, f func(context.Context) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stops = append(d.stops, stop{name, f})
}

// Shutdown marks the process not ready and runs the stops in reverse order,
// each bounded by timeout; errors are logged, not returned, so every stop
// runs.
func (d *Daemon) Shutdown(timeout time.Duration) {
	d.setNotReady(admin.ErrShuttingDown)
	d.mu.Lock()
	stops := d.stops
	d.stops = nil
	d.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := stops[i].f(ctx); err != nil {
			d.log.Warn("shutdown: "+stops[i].name, zap.Error(err))
		}
		cancel()
	}
}

// Client is the one connection rule: the client config describes, with
// the durability hook when ONCEQ_REDIS_MIN_REPLICAS asks for it. Short-lived
// commands (the producer CLI) use it too.
func Client(r config.Redis) (redis.UniversalClient, error) {
	ro, err := r.UniversalOptions()
	if err != nil {
		return nil, err
	}
	return client(r, ro)
}

func client(r config.Redis, ro *redis.UniversalOptions) (redis.UniversalClient, error) {
	c := redis.NewUniversalClient(ro)
	if r.MinReplicas > 0 {
		if err := RequireReplicas(c, r.MinReplicas, r.WaitTimeout); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}
