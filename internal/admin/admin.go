// Package admin serves what operators reach on both binaries: liveness,
// readiness, Prometheus metrics and the asynqmon dashboard, behind a token
// whenever one is configured.
package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/httpauth"
)

// Options configures Routes.
type Options struct {
	// Token guards /metrics and the dashboard; "" leaves them open, which
	// config allows only on loopback. Default: none.
	Token string
	// Ready reports whether the process can serve (Redis reachable, server
	// running). Its error goes to Log; /readyz, which anyone may read, says
	// only "shutting down" (ErrShuttingDown), "starting: waiting for Redis"
	// (ErrStarting), "redis unreachable" or why Redis refuses writes.
	Ready func(ctx context.Context) error
	// Degraded are lines /readyz adds to "ready": parts of the process
	// that cannot serve while the rest can (an optional dependency down).
	// Default: none.
	Degraded func() []string
	// Log gets why the process is not ready. Default: none.
	Log *zap.Logger
	// Guard, when set, replaces the Token check on /metrics (the API's
	// port accepts every API token there). Default: none.
	Guard func(http.Handler) http.Handler
	// Gatherer for /metrics. Default: none (no /metrics route).
	Gatherer prometheus.Gatherer
	// Dashboard is mounted under /monitoring/. Default: none.
	Dashboard http.Handler
}

// ErrShuttingDown is what Ready returns once the process is stopping.
var ErrShuttingDown = errors.New("shutting down")

// ErrStarting is what Ready wraps while the process starts: Redis has not
// answered yet, which is not an outage.
var ErrStarting = errors.New("starting")

// ErrRefusesWrites is what Ready wraps when Redis answers but refuses to
// write; /readyz names Redis's error code (NOREPLICAS, READONLY, OOM).
var ErrRefusesWrites = errors.New("redis refuses writes")

// ErrNoLiveness is what Ready wraps when a worker cannot write its liveness
// key (other workers may take it for dead); /readyz names Redis's error
// code where there is one.
var ErrNoLiveness = errors.New("cannot keep its liveness key")

// Routes registers /healthz, /readyz, /metrics and /monitoring/ on mux.
func Routes(mux *http.ServeMux, o Options) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	guard := func(h http.Handler) http.Handler { return RequireToken(o.Token, h) }
	if o.Guard != nil {
		guard = o.Guard
	}
	// Liveness never touches Redis: a Redis outage must not restart every pod.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if o.Ready != nil {
			if err := o.Ready(ctx); err != nil {
				// Unauthenticated: no addresses or driver messages.
				why := "redis unreachable"
				switch {
				case errors.Is(err, ErrShuttingDown):
					why = "shutting down"
				case errors.Is(err, ErrStarting):
					why = "starting: waiting for Redis"
				case errors.Is(err, ErrRefusesWrites):
					why = "redis refuses writes (" + refusal(err) + ")"
				case errors.Is(err, ErrNoLiveness):
					why = ErrNoLiveness.Error() + " (" + refusal(err) + ")"
				}
				o.Log.Warn("admin: not ready", zap.String("reason", why), zap.Error(err))
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
		if o.Degraded != nil {
			for _, line := range o.Degraded() {
				w.Write([]byte(line + "\n"))
			}
		}
	})
	if o.Gatherer != nil {
		// OpenMetrics, to a scraper that asks for it, carries the handler
		// histogram's exemplars (trace ids); plain text stays the default.
		mux.Handle("GET /metrics", guard(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true})))
	}
	if o.Dashboard != nil {
		mux.Handle(dashboardRoot+"/", frameDeny(sameOrigin(RequireToken(o.Token, o.Dashboard))))
	}
}

// refusal is the code of Redis's error (its first word: NOREPLICAS,
// READONLY, OOM), "not replicated" for a failed WAIT, or "unreachable":
// no addresses or messages for an unauthenticated reader.
func refusal(err error) string {
	var re redis.Error
	switch {
	case errors.As(err, &re):
		code, _, _ := strings.Cut(re.Error(), " ")
		return code
	case errors.Is(err, ErrRefusesWrites):
		return "not replicated"
	}
	return "unreachable"
}

// dashboardRoot is where the dashboard is mounted; asynqmon builds its
// links from it.
const dashboardRoot = "/monitoring"

// Dashboard is asynqmon on an existing client, plus /monitoring/jobs/{key},
// which opens a job's task page by its onceq key. readOnly hides every
// action that changes queues.
func Dashboard(rdb redis.UniversalClient, readOnly bool) (http.Handler, error) {
	store, err := dedup.NewRedisStore(rdb, storage.Options{}) // only read: its TTLs do not matter
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(dashboardRoot+"/", asynqmon.New(asynqmon.Options{
		RootPath:     dashboardRoot,
		RedisConnOpt: sharedClient{rdb},
		ReadOnly:     readOnly,
	}))
	p, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		return nil, err
	}
	mux.Handle("GET "+dashboardRoot+"/jobs/{key...}", jobPage(p))
	return mux, nil
}

// sharedClient hands asynqmon our client instead of letting it dial its own.
type sharedClient struct{ c redis.UniversalClient }

func (s sharedClient) MakeRedisClient() any { return s.c }

// RequireToken accepts "Authorization: Bearer <token>" (the scheme in any
// case), or HTTP Basic with the
// token as password so a browser can open the dashboard. Tokens are compared
// in constant time. An empty token lets every request through.
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got string
		if _, pass, ok := r.BasicAuth(); ok {
			got = pass
		} else if b, ok := httpauth.Bearer(r); ok {
			got = b
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="onceq", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
