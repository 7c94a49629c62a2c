package daemon

import (
	"io"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/internal/observe"
)

// Logger is a daemon's logger: l's shape on w, with go-redis's and the
// standard library's loggers routed into it, so that every line of the
// process is JSON in production. done flushes it and puts the standard
// logger back.
func Logger(l config.Log, w io.Writer) (log *zap.Logger, done func(), err error) {
	log, err = observe.NewLogger(l.Env, l.Level, w)
	if err != nil {
		return nil, nil, err
	}
	restore := observe.Capture(log)
	return log, func() { restore(); _ = log.Sync() }, nil
}

// Fail writes why the daemon name stopped with an error: one line in the
// shape ONCEQ_ENV asks for, read from env on its own because the rest of
// the configuration may be what failed.
func Fail(w io.Writer, env map[string]string, name string, err error) {
	earlyLogger(w, env).Named(name).Error(name+" failed", zap.Error(err))
}

// earlyLogger is for the lines written outside run: before its logger
// exists, or after it has gone.
func earlyLogger(w io.Writer, env map[string]string) *zap.Logger {
	l := config.LogFrom(env)
	log, err := observe.NewLogger(l.Env, l.Level, w)
	if err != nil {
		return zap.NewNop() // LogFrom gives valid values only
	}
	return log
}
