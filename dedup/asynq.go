package dedup

import "github.com/hibiken/asynq"

// ServerConfig returns cfg with what the middleware needs of an asynq
// server: IsFailure, so a task waiting on another worker's lease is not
// counted as failed, and a RetryDelayFunc that brings it back after that
// lease (cfg's own delay func still decides for every other error).
// Together with Middleware.Wrap it is the whole wiring:
//
//	srv := asynq.NewServer(redisOpt, dedup.ServerConfig(asynq.Config{Concurrency: 10}))
//	srv.Run(mw.Wrap(yourHandler))
func ServerConfig(cfg asynq.Config) asynq.Config {
	cfg.IsFailure = IsFailure
	cfg.RetryDelayFunc = RetryDelay(cfg.RetryDelayFunc)
	return cfg
}
