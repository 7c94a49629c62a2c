package observe_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/onceq/onceq/internal/observe"
)

// go-redis's pool chatter (a failed dial) is debug: the command or daemon
// reports the outage itself, once, in its own words.
func TestRedisChatterIsDebug(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	defer observe.Capture(zap.New(core))()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("ping of a closed port answered")
	}
	lines := logs.FilterLoggerName("redis").All()
	if len(lines) == 0 {
		t.Fatal("go-redis logged nothing about the failed dial")
	}
	for _, e := range lines {
		if e.Level != zapcore.DebugLevel {
			t.Errorf("%s line %q, want debug", e.Level, e.Message)
		}
	}
}
