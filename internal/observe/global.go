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

// redisLogger adapts zap to go-redis's logger, at debug: what it logs (a
// failed dial, a bad connection dropped) is pool chatter, four lines before
// the error onceq itself reports (a command's "cannot reach Redis", a
// daemon's readiness, onceq_redis_up and its liveness warnings).
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
