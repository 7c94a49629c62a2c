package observe

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Capture sends the process-wide loggers that do not take ours (go-redis's
// own, which prints "redis: connection pool: failed to dial" while Redis is
// down, and Go's standard log, which net/http and asynqmon use) to log, so
// that every line a daemon writes has log's shape. The returned function
// puts the standard logger back; go-redis has no way to read its logger,
// so it keeps log until the next Capture.
func Capture(log *zap.Logger) (restore func()) {
	redis.SetLogger(redisLogger{log.Named("redis")})
	return zap.RedirectStdLog(log.Named("stdlog"))
}

// redisLogger adapts zap to go-redis's logger. go-redis logs only what went
// wrong (a failed dial, a bad connection dropped), hence warn.
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
