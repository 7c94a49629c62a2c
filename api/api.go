package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Options configures New.
type Options struct {
	// Producer enqueues the jobs. Required.
	Producer *tasks.Producer
	// Store holds the HTTP replay records (namespace "http") and answers
	// job status reads. Its DoneTTL is how long a response is replayed, so
	// give the API a store of its own. Required.
	Store dedup.Store
	// Catalog builds every job: routes, key rules, windows. Default: the
	// built-in task types under the default windows.
	Catalog *tasks.Catalog
	// Redis is the Producer's Redis. GET /v1/jobs reads through the
	// Producer, so it is optional.
	Redis redis.UniversalClient
	// Tokens are the accepted bearer tokens. None leaves the non-webhook
	// routes open (config allows that on loopback only). Default: none.
	Tokens []string
	// WebhookSecrets maps a webhook source to its HMAC-SHA256 secret; a
	// source without one is a 404. Default: none.
	WebhookSecrets map[string]string
	// WebhookIDFields names, per source, the top-level field of the signed
	// body that holds the sender's event id. Default: "id".
	WebhookIDFields map[string]string
	// WebhookTolerance is how far a signature's timestamp may be from Now.
	// Default: 5m.
	WebhookTolerance time.Duration
	// MaxBodyBytes caps a request body. Default: 1 MiB.
	MaxBodyBytes int64
	// Lease of an HTTP idempotency claim: how long a retry of a request
	// whose server died in flight is answered 409. Default: 30s.
	Lease time.Duration
	// Timeout bounds each request's Redis work; past it the answer is a 503.
	// Default: 5s.
	Timeout time.Duration
	// Log gets failures; decisions go through Observer. Default: none.
	Log *zap.Logger
	// Observer sees the API's own decisions (replayed, in progress,
	// mismatch, throttled, bad payload). Default: none.
	Observer dedup.Observer
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
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = func(context.Context, dedup.Decision) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Catalog == nil {
		c, err := tasks.NewCatalog(tasks.Windows{})
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
	case o.WebhookTolerance < 0 || o.MaxBodyBytes < 0 || o.Lease < time.Millisecond || o.Timeout < 0:
		return o, errors.New("api: WebhookTolerance, MaxBodyBytes, Lease and Timeout must be positive")
	}
	for i, t := range o.Tokens {
		if t == "" {
			return o, fmt.Errorf("api: token %d is empty", i+1)
		}
	}
	for src, s := range o.WebhookSecrets {
		if s == "" {
			return o, fmt.Errorf("api: webhook source %q has an empty secret", src)
		}
		// Fail at start-up, not on every delivery, for a source name the
		// webhook task refuses.
		if _, err := tasks.NewWebhook(tasks.Webhook{Source: src, EventID: "probe", Type: "probe"}); err != nil {
			return o, fmt.Errorf("api: webhook source %q: %w", src, err)
		}
	}
	for src, f := range o.WebhookIDFields {
		if _, ok := o.WebhookSecrets[src]; !ok || f == "" || reservedEventField[f] {
			return o, fmt.Errorf("api: webhook id field %q of source %q: the source needs a secret, the field a name other than type, data or attempt", f, src)
		}
	}
	return o, nil
}

// server holds what the handlers share.
type server struct {
	opts   Options
	tokens [][sha256.Size]byte
}

// New returns the API's handler. Mount it at the root or under "/v1/".
func New(o Options) (http.Handler, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &server{opts: o}
	for _, t := range o.Tokens {
		s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
	}
	mux := http.NewServeMux()
	for _, k := range o.Catalog.Kinds() {
		if k.Route != "" {
			mux.Handle("POST /v1/"+k.Route, s.bearer(s.ingest(k)))
		}
	}
	mux.Handle("POST /v1/webhooks/{source}", http.HandlerFunc(s.webhook))
	// {key...}: a key's "/" may arrive escaped (%2F) or not.
	mux.Handle("GET /v1/jobs/{key...}", s.bearer(http.HandlerFunc(s.job)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(http.StatusNotFound, probNotFound, "no route "+r.Method+" "+r.URL.Path).write(w)
	})
	return s.base(mux), nil
}

// base sets what every response carries and turns a panic into a 500
// problem instead of a dropped connection. No CORS headers, ever: browsers
// get no cross-origin access.
func (s *server) base(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})
}

// bearer wants one of the tokens. Both sides are hashed first, so the
// constant-time compare does not even leak a token's length.
func (s *server) bearer(next http.Handler) http.Handler {
	if len(s.tokens) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		match := 0
		for _, t := range s.tokens {
			match |= subtle.ConstantTimeCompare(sum[:], t[:])
		}
		if !ok || got == "" || match != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="onceq"`)
			problem(http.StatusUnauthorized, probUnauthorized, "send Authorization: Bearer <token>").write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}
