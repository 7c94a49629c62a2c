package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/tasks"
)

// Options configures New.
type Options struct {
	// Producer enqueues the jobs. Required.
	Producer *dedup.Producer
	// Store holds the HTTP replay records (namespace "http") and answers
	// job status reads. Its DoneTTL is how long a response is replayed, so
	// give the API a store of its own. Required.
	Store storage.Store
	// Catalog builds every job: routes, key rules, windows; give each
	// SchemeGitHub source a replay window (tasks.Windows.WebhookReplay).
	// Default: the built-in task types under the default windows, each
	// GitHub source's replay window DefaultGitHubReplayWindow.
	Catalog *tasks.Catalog
	// Redis is the Producer's Redis; it keeps who enqueued each job, so
	// GET /v1/jobs shows a job only to its owner. Required.
	Redis redis.UniversalClient
	// Clients are the named callers; each owns its idempotency keys and
	// jobs. Default: none.
	Clients []Client
	// Tokens are bearer tokens without a name; each is a principal named by
	// DerivedPrincipal. With neither Clients nor Tokens the non-webhook
	// routes are open (config allows that on loopback only), all callers
	// one principal, Anonymous. Default: none.
	Tokens []string
	// WebhookSecrets maps a webhook source to its HMAC-SHA256 secrets;
	// a signature by any of them is accepted, so a sender can rotate. A
	// source without one is a 404. Default: none.
	WebhookSecrets map[string][]string
	// WebhookSchemes names, per source, how its sender signs. A source not
	// named is SchemeOnceq. Default: none.
	WebhookSchemes map[string]Scheme
	// WebhookIDFields names, per SchemeOnceq source, the top-level field of
	// the signed body that holds the sender's event id. Default: "id".
	WebhookIDFields map[string]string
	// WebhookTolerance is how far a signature's timestamp may be from Now.
	// Default: 5m.
	WebhookTolerance time.Duration
	// MaxBodyBytes caps a request body. Default: 1 MiB.
	MaxBodyBytes int64
	// WebhookBodyBudget caps the bytes of webhook bodies read before their
	// signature is checked, all requests together; at least MaxBodyBytes.
	// A body it has no room for waits up to WebhookBudgetWait, then is
	// answered 503 with Retry-After, unread. Default: 32 MiB.
	WebhookBodyBudget int64
	// WebhookBudgetWait is how long a webhook waits for room in the
	// budget. Default: 2s.
	WebhookBudgetWait time.Duration
	// WebhookFirstByteTimeout bounds the wait for a webhook body's first
	// byte, which holds no budget; a body that has not started by then is
	// answered 408. Default: 5s.
	WebhookFirstByteTimeout time.Duration
	// WebhookBodyTimeout bounds the read of a webhook body from its first
	// byte; a slower body is answered 408. Default: 10s.
	WebhookBodyTimeout time.Duration
	// WebhookPeerBudget caps the part of WebhookBodyBudget one peer
	// address may hold; beyond it 503 at once. At least MaxBodyBytes.
	// Default: WebhookBodyBudget/8, at least MaxBodyBytes.
	WebhookPeerBudget int64
	// Lease of an HTTP idempotency claim: how long a retry of a request
	// whose API process died in flight (or that reaches another replica
	// after a lost Redis reply) is answered 409. It covers the request's
	// own Redis work only, never a job's run. Default: 2*Timeout + 1s.
	Lease time.Duration
	// ReplayCacheTTL is how long a process answers a replay from memory
	// once it has stored or replayed the response; keep it below the
	// replay store's DoneTTL. Negative disables the cache. Default: 30s.
	ReplayCacheTTL time.Duration
	// OwnerTTL is how long the API remembers which principal enqueued a
	// job; past it the job is no one's and GET /v1/jobs answers 404.
	// Default: 7 days.
	OwnerTTL time.Duration
	// Timeout bounds each request's Redis work; past it the answer is a 503.
	// Default: 5s.
	Timeout time.Duration
	// Log gets failures; decisions go through Observer. Default: none.
	Log *zap.Logger
	// Observer sees the API's own decisions (replayed, in progress,
	// mismatch, bad payload, error); the Producer's Observer sees the
	// enqueue decisions (throttled among them). Default: none.
	Observer dedup.Observer
	// Requests sees every request the API answers, by route pattern;
	// New starts each route's series. Default: none.
	Requests Requests
	// Now is the clock for signature timestamps. Default: time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.WebhookTolerance == 0 {
		o.WebhookTolerance = 5 * time.Minute
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.WebhookBodyBudget == 0 {
		o.WebhookBodyBudget = 32 << 20
	}
	if o.WebhookBudgetWait == 0 {
		o.WebhookBudgetWait = 2 * time.Second
	}
	if o.WebhookBodyTimeout == 0 {
		o.WebhookBodyTimeout = 10 * time.Second
	}
	if o.WebhookFirstByteTimeout == 0 {
		o.WebhookFirstByteTimeout = 5 * time.Second
	}
	if o.WebhookPeerBudget == 0 {
		o.WebhookPeerBudget = min(max(o.WebhookBodyBudget/8, o.MaxBodyBytes), o.WebhookBodyBudget)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Lease == 0 {
		o.Lease = 2*o.Timeout + time.Second
	}
	if o.ReplayCacheTTL == 0 {
		o.ReplayCacheTTL = 30 * time.Second
	}
	if o.OwnerTTL == 0 {
		o.OwnerTTL = 7 * 24 * time.Hour
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = func(context.Context, dedup.Event) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Requests == nil {
		o.Requests = noRequests{}
	}
	if o.Catalog == nil {
		replay := map[string]time.Duration{}
		for src, sc := range o.WebhookSchemes {
			if sc == SchemeGitHub {
				replay[src] = DefaultGitHubReplayWindow
			}
		}
		c, err := tasks.NewCatalog(tasks.Windows{WebhookReplay: replay})
		if err != nil {
			return o, err
		}
		o.Catalog = c
	}
	switch {
	case o.Producer == nil:
		return o, errors.New("api: Options.Producer is required")
	case o.Store == nil:
		return o, errors.New("api: Options.Store is required")
	case o.Redis == nil:
		return o, errors.New("api: Options.Redis is required")
	case o.WebhookTolerance < 0 || o.MaxBodyBytes < 0 || o.Lease < time.Millisecond || o.Timeout < 0 || o.OwnerTTL < time.Second:
		return o, errors.New("api: WebhookTolerance, MaxBodyBytes, Lease and Timeout must be positive")
	case o.WebhookBodyBudget < o.MaxBodyBytes:
		// A body of the largest size would never be admitted.
		return o, fmt.Errorf("api: WebhookBodyBudget (%d) must be at least MaxBodyBytes (%d)", o.WebhookBodyBudget, o.MaxBodyBytes)
	case o.WebhookPeerBudget < o.MaxBodyBytes:
		return o, fmt.Errorf("api: WebhookPeerBudget (%d) must be at least MaxBodyBytes (%d)", o.WebhookPeerBudget, o.MaxBodyBytes)
	case o.WebhookBudgetWait < 0 || o.WebhookBodyTimeout < 0 || o.WebhookFirstByteTimeout < 0:
		return o, errors.New("api: WebhookBudgetWait, WebhookBodyTimeout and WebhookFirstByteTimeout must be positive")
	}
	if _, err := o.clients(); err != nil {
		return o, err
	}
	for src, secrets := range o.WebhookSecrets {
		if len(secrets) == 0 || slices.Contains(secrets, "") {
			return o, fmt.Errorf("api: webhook source %q has an empty secret", src)
		}
		// Fail at start-up, not on every delivery, for a source name the
		// webhook task refuses.
		if _, err := tasks.NewWebhook(tasks.Webhook{Source: src, EventID: "probe", Type: "probe"}); err != nil {
			return o, fmt.Errorf("api: webhook source %q: %w", src, err)
		}
	}
	for src, f := range o.WebhookIDFields {
		if _, ok := o.WebhookSecrets[src]; !ok || f == "" || reservedEventField[f] || o.scheme(src) != SchemeOnceq {
			return o, fmt.Errorf("api: webhook id field %q of source %q: the source needs a secret and the onceq scheme, the field a name other than type, data or attempt", f, src)
		}
	}
	for src := range o.WebhookSchemes {
		if _, ok := o.WebhookSecrets[src]; !ok {
			return o, fmt.Errorf("api: webhook source %q has a scheme but no secret", src)
		}
	}
	return o, nil
}

func (o Options) scheme(source string) Scheme {
	if sc, ok := o.WebhookSchemes[source]; ok {
		return sc
	}
	return SchemeOnceq
}

// sources builds each webhook source's verifier.
func (o Options) sources() (map[string]sourceVerifier, error) {
	m := make(map[string]sourceVerifier, len(o.WebhookSecrets))
	for src, secrets := range o.WebhookSecrets {
		v, err := newSourceVerifier(o.scheme(src), secrets)
		if err != nil {
			return nil, fmt.Errorf("api: webhook source %q: %w", src, err)
		}
		m[src] = v
	}
	return m, nil
}

// server holds what the handlers share.
type server struct {
	opts         Options
	sources      map[string]sourceVerifier
	budget       *budget
	creds        []credential
	guard        *httpidem.Guard
	unsure       unsure
	settling     settling
	fingerprints fingerprints
	tails        sync.WaitGroup // owner writes of answers already sent
}

// Handler is the API's handler for the whole server. A fresh answer goes
// out before its last writes (the replay record, the job's owner) land:
// call Drain once the http.Server has shut down.
type Handler struct {
	http.Handler
	s *server
}

// Drain waits for the writes of answers already sent, or until ctx ends.
func (h *Handler) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.s.tails.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.s.guard.Drain(ctx)
}

// New returns the API's handler for the whole server: routes under /v1/,
// and a 404 problem for every other path. Mount it at "/" (more specific
// patterns, such as /metrics, may sit beside it).
func New(o Options) (*Handler, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	cs, err := o.clients()
	if err != nil {
		return nil, err
	}
	sources, err := o.sources()
	if err != nil {
		return nil, err
	}
	guard, err := httpidem.New(o.Store, httpidem.Options{Lease: o.Lease, Timeout: o.Timeout, ReplayCacheTTL: o.ReplayCacheTTL,
		Observer: o.Observer, OnError: func(_ context.Context, msg string, k dedup.Key, err error) {
			o.Log.Warn("api: "+msg, zap.String("key", k.String()), zap.Error(err))
		}})
	if err != nil {
		return nil, err
	}
	s := &server{opts: o, sources: sources, creds: credentials(cs), guard: guard, fingerprints: fingerprints{ttl: o.ReplayCacheTTL},
		budget: &budget{sem: semaphore.NewWeighted(o.WebhookBodyBudget), wait: o.WebhookBudgetWait,
			firstByte: o.WebhookFirstByteTimeout, bodyTimeout: o.WebhookBodyTimeout,
			perPeer: o.WebhookPeerBudget, peers: map[string]int64{}}}
	mux := &routes{ServeMux: http.NewServeMux(), zero: o.Requests.Zero}
	for _, k := range o.Catalog.Kinds() {
		if route := o.Catalog.Route(k.Type); route != "" {
			handle(mux, http.MethodPost, "/v1/"+route, s.bearer(s.ingest(k, route)))
		}
	}
	handle(mux, http.MethodPost, "/v1/webhooks/{source}", http.HandlerFunc(s.webhook))
	handle(mux, http.MethodGet, "/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	}))
	// {key...}: a key's "/" may arrive escaped (%2F) or not.
	handleEach(mux, "/v1/jobs/{key...}", route{http.MethodGet, s.bearer(http.HandlerFunc(s.job))},
		route{http.MethodDelete, s.bearer(http.HandlerFunc(s.reset))})
	// Without this the mux answers GET /v1/jobs with a 307 to /v1/jobs/.
	mux.HandleFunc("/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		problem(http.StatusNotFound, probNotFound, "no route "+r.Method+" "+r.URL.Path+"; read a job at /v1/jobs/{key}").write(w)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(http.StatusNotFound, probNotFound, "no route "+r.Method+" "+r.URL.Path).write(w)
	})
	return &Handler{Handler: s.base(mux), s: s}, nil
}

// base sets what every response carries, turns a panic into a 500
// problem instead of a dropped connection, and counts each answer by the
// route the mux chose (r.Pattern, set on this very request). A 401 is
// logged too: a caller with a wrong or missing token is otherwise invisible.
// No CORS headers, ever: browsers get no cross-origin access.
func (s *server) base(next http.Handler) http.Handler {
	problems := s.problems(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		problems.ServeHTTP(sw, r)
		code := sw.code()
		s.opts.Requests.Observe(r.Pattern, code, time.Since(start))
		if code == http.StatusUnauthorized {
			s.opts.Log.Info("api: unauthorized", zap.String("route", r.Pattern), zap.String("remote", r.RemoteAddr),
				zap.Bool("authorization_sent", r.Header.Get("Authorization") != ""))
		}
	})
}

func (s *server) problems(next http.Handler) http.Handler {
	return Problems(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.opts.Log.Error("api: handler panicked", zap.String("path", r.URL.Path), zap.Any("panic", v))
				problem(http.StatusInternalServerError, probInternal, "").write(w)
			}
		}()
		next.ServeHTTP(w, r)
	}))
}
