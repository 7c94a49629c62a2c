package onceq

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Server is an asynq server whose handlers run inside the Middleware: the
// whole wiring of a worker in one call.
//
//	srv, err := onceq.NewServer(rdb, store, asynq.Config{Concurrency: 10}, onceq.MiddlewareOptions{Catalog: catalog})
//	err = srv.Start(mux)
//	...
//	err = srv.Shutdown(ctx)
type Server struct {
	srv *asynq.Server
	mw  *Middleware
}

// NewServer builds a Server on rdb (the caller owns and closes it) and
// store (nil: a RedisStore on rdb with the default options). cfg is
// asynq's; NewServer applies ServerConfig to it.
func NewServer(rdb redis.UniversalClient, store Store, cfg asynq.Config, opts MiddlewareOptions) (*Server, error) {
	if store == nil {
		var err error
		if store, err = NewRedisStore(rdb, StoreOptions{}); err != nil {
			return nil, err
		}
	}
	mw, err := NewMiddleware(store, opts)
	if err != nil {
		return nil, err
	}
	return &Server{srv: asynq.NewServerFromRedisClient(rdb, ServerConfig(cfg)), mw: mw}, nil
}

// ServerConfig returns cfg with what the Middleware needs of an asynq
// server that is not a Server: IsFailure, so a task waiting on another
// worker's lease is not counted as failed, and a RetryDelayFunc that brings
// it back after that lease (cfg's own still decides for every other error).
// Call the Middleware's Shutdown after the asynq server's.
func ServerConfig(cfg asynq.Config) asynq.Config {
	cfg.IsFailure = isFailure
	cfg.RetryDelayFunc = retryDelay(cfg.RetryDelayFunc)
	return cfg
}

// Start runs h (usually an asynq.ServeMux) inside the middleware and
// starts fetching tasks.
func (s *Server) Start(h asynq.Handler) error {
	return s.srv.Start(s.mw.Wrap(h))
}

// Shutdown stops fetching, waits up to cfg.ShutdownTimeout for handlers,
// then releases the claims of those asynq cut off, so their next delivery
// claims at once; ctx bounds the release.
func (s *Server) Shutdown(ctx context.Context) error {
	s.srv.Shutdown()
	return s.mw.Shutdown(ctx)
}

var errShutdown = errors.New("onceq: shutdown")
