package asynqwire

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Verified are the asynq releases this package was checked against: their
// scripts are lua/asynq's, their key layout keys.go's, their task message
// msg.go's.
var Verified = []string{"v0.26.0"}

const asynqPath = "github.com/hibiken/asynq"

// Check reports whether the asynq this program links is a verified one: its
// module version (or its replacement's) is in Verified, where the build
// records it (test binaries do not), and the scripts its client sends to
// insert a task are lua/asynq's. The error names the linked version and the
// verified ones.
func Check() error {
	checkOnce.Do(func() {
		shas, err := capturedInserts()
		checkErr = check(linkedVersion(), shas, err)
	})
	return checkErr
}

var (
	checkOnce sync.Once
	checkErr  error
)

// ErrUnverified is wrapped by Check's error.
var ErrUnverified = errors.New("the linked asynq is not one this release of the library verified")

func check(version string, shas []string, captureErr error) error {
	if captureErr != nil {
		return fmt.Errorf("%w: asynq %s: %v", ErrUnverified, version, captureErr)
	}
	for _, sha := range shas {
		if guards[sha] == nil {
			return fmt.Errorf("%w: asynq %s inserts a task with a script unlike %s's (SHA-1 %s)", ErrUnverified, version, strings.Join(Verified, ", "), sha)
		}
	}
	// A test binary carries no dependency versions: the scripts decide.
	if version != unknownVersion && !slices.Contains(Verified, version) {
		return fmt.Errorf("%w: asynq %s is linked, verified: %s", ErrUnverified, version, strings.Join(Verified, ", "))
	}
	return nil
}

const unknownVersion = "(unknown)"

// linkedVersion is asynq's module version in the build, its replacement's
// when replaced: "(replaced by <path>)" for a directory, "(unknown)"
// without dependency information.
func linkedVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return unknownVersion
	}
	for _, m := range bi.Deps {
		if m.Path != asynqPath {
			continue
		}
		if r := m.Replace; r != nil {
			if r.Version == "" || r.Version == "(devel)" {
				return "(replaced by " + r.Path + ")"
			}
			return r.Version
		}
		return m.Version
	}
	return unknownVersion
}

// capturedInserts are the SHA-1s of the scripts the linked asynq's client
// sends to enqueue and to schedule a task with an id: its calls go to a
// client that answers every command itself and reaches no server.
func capturedInserts() ([]string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: "capture.invalid:1", MaxRetries: -1})
	defer rdb.Close()
	var c capture
	rdb.AddHook(&c)
	client := asynq.NewClientFromRedisClient(rdb)
	for _, opts := range [][]asynq.Option{{asynq.TaskID("capture")}, {asynq.TaskID("capture"), asynq.ProcessIn(1e9)}} {
		c.sha = ""
		_, _ = client.EnqueueContext(context.Background(), asynq.NewTask("capture", nil), opts...)
		if c.sha == "" {
			return nil, errors.New("its client inserted a task without a script")
		}
		c.shas = append(c.shas, c.sha)
	}
	return c.shas, nil
}

var errCaptured = errors.New("asynqwire: captured")

// capture answers every command with its zero value and keeps the SHA-1
// of the first script call, which it fails.
type capture struct {
	sha  string
	shas []string
}

func (*capture) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *capture) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && c.sha == "" {
			c.sha = scriptSHA(cmd)
			cmd.SetErr(errCaptured)
			return errCaptured
		}
		return nil
	}
}

func (*capture) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return errCaptured }
}
