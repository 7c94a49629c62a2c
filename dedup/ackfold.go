package dedup

// This file is onceq's only coupling to asynq's internals: it recognises
// asynq v0.26.0's acknowledgement scripts on the wire and sends the task's
// Complete in the same pipeline, ahead of them, saving one round trip per
// task. ackfold_test.go pins the assumption to go.mod's asynq version.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// foldAsynqVersion is the asynq release whose acknowledgement was checked:
// after a successful handler its processor runs RDB.Done (no Retention) or
// RDB.MarkAsComplete (Retention) on the server's Redis client, as one
// EVALSHA (EVAL after NOSCRIPT) of the scripts below, with KEYS[1] =
// asynq:{<queue>}:active and ARGV[1] = the task id.
const foldAsynqVersion = "v0.26.0"

// ackScripts are the SHA-1s of asynq v0.26.0's doneCmd, doneUniqueCmd,
// markAsCompleteCmd and markAsCompleteUniqueCmd (internal/rdb/rdb.go).
var ackScripts = map[string]bool{
	"1241eaa1c73409baaf1fea0c08d203a4911bda15": true,
	"a2631c71357a54b4c3e7450b1757e7f3f49d6c81": true,
	"117dca952700588e559c7ace20b925096d587974": true,
	"ce6833ccce362a8c0ee53beee413341daf52e39c": true,
}

// asynqVersion is the asynq module linked into this binary ("" when the
// binary carries no module list, as test binaries do).
var asynqVersion = func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/hibiken/asynq" {
			if d.Replace != nil {
				return d.Replace.Path + "@" + d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// FoldCompletes sends each completion in the same pipeline as asynq's own
// acknowledgement of the task, Complete first: three round trips per task
// instead of four. rdb must be the client given to
// asynq.NewServerFromRedisClient and to this middleware's RedisStore; call
// it before the server starts. It returns nil when folding is on, otherwise
// why not (another asynq version, a Cluster client, another store), and
// completions stay separate round trips.
//
// A completion waits at most wait (default 1s) for its acknowledgement, then
// goes alone; one that fails is retried while the lease lasts, the hold kept
// alive meanwhile; Shutdown sends what is still waiting.
func (m *Middleware) FoldCompletes(rdb redis.UniversalClient, wait time.Duration) error {
	if v := asynqVersion(); v != foldAsynqVersion {
		if v == "" {
			v = "unknown"
		}
		return fmt.Errorf("dedup: completes not folded into acks: asynq version %s, the fold is verified for %s", v, foldAsynqVersion)
	}
	c, ok := rdb.(*redis.Client)
	if !ok {
		return fmt.Errorf("dedup: completes not folded into acks: %T (a Cluster pipeline does not keep Complete ahead of the ack)", rdb)
	}
	s, ok := m.store.(*RedisStore)
	if !ok || s.rdb != rdb {
		return errors.New("dedup: completes not folded into acks: the store is not a RedisStore on the same client")
	}
	if wait <= 0 {
		wait = time.Second
	}
	f := &ackFold{m: m, store: s, rdb: c, wait: wait, pending: map[string]*pendingComplete{}}
	c.AddHook(f)
	m.fold = f
	return nil
}

// Folded is how many completions rode in an asynq acknowledgement.
func (m *Middleware) Folded() int64 {
	if m.fold == nil {
		return 0
	}
	return m.fold.folded.Load()
}

type ackFold struct {
	m     *Middleware
	store *RedisStore
	rdb   *redis.Client
	wait  time.Duration

	mu      sync.Mutex
	pending map[string]*pendingComplete // by queue + "\x00" + task id
	folded  atomic.Int64
}

type pendingComplete struct {
	h      Hold
	result []byte
	timer  *time.Timer
}

// await parks a finished run's completion for asynq's acknowledgement of
// the task in ctx. false: no task id in ctx, or a result the store will
// refuse; the caller completes as usual.
func (f *ackFold) await(ctx context.Context, h Hold, result []byte) bool {
	id, ok := asynq.GetTaskID(ctx)
	q, ok2 := asynq.GetQueueName(ctx)
	if !ok || !ok2 || len(result) > f.store.opts.MaxResultBytes {
		return false
	}
	name := q + "\x00" + id
	p := &pendingComplete{h: h, result: result}
	f.mu.Lock()
	old := f.pending[name]
	f.pending[name] = p
	p.timer = time.AfterFunc(f.wait, func() {
		if f.take(name, p) {
			f.m.completeLater(p.h, p.result) // no acknowledgement came
		}
	})
	f.mu.Unlock()
	if old != nil && old.timer.Stop() {
		f.m.completeLater(old.h, old.result)
	}
	return true
}

func (f *ackFold) take(name string, p *pendingComplete) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending[name] != p {
		return false
	}
	delete(f.pending, name)
	return true
}

// flush sends every waiting completion now (Shutdown).
func (f *ackFold) flush() {
	f.mu.Lock()
	ps := f.pending
	f.pending = map[string]*pendingComplete{}
	f.mu.Unlock()
	for _, p := range ps {
		p.timer.Stop()
		f.m.completeLater(p.h, p.result)
	}
}

// match returns the completion waiting for cmd when cmd is asynq's
// acknowledgement of its task.
func (f *ackFold) match(cmd redis.Cmder) *pendingComplete {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return nil
	}
	args := cmd.Args()
	if len(args) < 5 {
		return nil
	}
	script, _ := args[1].(string)
	if name == "eval" {
		sum := sha1.Sum([]byte(script))
		script = hex.EncodeToString(sum[:])
	}
	n, _ := args[2].(int)
	if !ackScripts[script] || n < 1 || len(args) < 4+n {
		return nil
	}
	active, _ := args[3].(string)
	q, ok := strings.CutPrefix(active, "asynq:{")
	q, ok2 := strings.CutSuffix(q, "}:active")
	id, _ := args[3+n].(string)
	if !ok || !ok2 || id == "" {
		return nil
	}
	key := q + "\x00" + id
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pending[key]
	if p == nil || !p.timer.Stop() {
		return nil
	}
	delete(f.pending, key)
	return p
}

// send runs the completion and asynq's acknowledgement in one pipeline.
func (f *ackFold) send(ctx context.Context, ack redis.Cmder, p *pendingComplete) error {
	keys, args := f.store.completeArgs(p.h, p.result)
	var done *redis.Cmd
	_, _ = f.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		done = finishScript.EvalSha(ctx, pl, keys, args...)
		return pl.Process(ctx, ack)
	})
	n, err := done.Int64()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Redis lost its scripts (restart): load ours and complete now,
		// before asynq retries its own with EVAL.
		n, err = finishScript.Run(ctx, f.rdb, keys, args...).Int64()
	}
	f.folded.Add(1)
	if err = f.store.finish(ctx, OpComplete, OutcomeCompleted, p.h, n, err); err != nil && !errors.Is(err, ErrLeaseLost) {
		f.m.completeLater(p.h, p.result) // Redis trouble: keep trying while the lease lasts
	} else {
		f.m.untrack(p.h)
	}
	return ack.Err()
}

func (f *ackFold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *ackFold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if p := f.match(cmd); p != nil {
			return f.send(ctx, cmd, p)
		}
		return next(ctx, cmd)
	}
}

func (f *ackFold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
