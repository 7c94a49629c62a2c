package dedup

// This file is onceq's only coupling to asynq's internals: the client asynq
// is given recognises asynq v0.26.0's acknowledgement scripts and runs, in
// their place, one script that records the task's Complete and then runs
// asynq's script unchanged: one command instead of two, one round trip less
// per task. ackfold_test.go pins the assumption to go.mod's asynq version.

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
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
// EVALSHA (EVAL after NOSCRIPT) of the scripts in lua/asynq, with KEYS[1] =
// asynq:{<queue>}:active and ARGV[1] = the task id.
const foldAsynqVersion = "v0.26.0"

// lua/asynq holds asynq v0.26.0's doneCmd, doneUniqueCmd, markAsCompleteCmd
// and markAsCompleteUniqueCmd (internal/rdb/rdb.go) byte for byte: they are
// found by the SHA-1 asynq sends, so only an identical script is ever folded.
//
//go:embed lua/asynq/*.lua
var asynqLua embed.FS

// foldScripts maps the SHA-1 of each asynq acknowledgement to the script run
// instead: finish.lua on the last key and the last five arguments, then
// asynq's script, which sees its own KEYS and ARGV at the indices it uses.
// It returns {finish's reply, asynq's reply}.
var foldScripts = func() map[string]*redis.Script {
	finish, err := luaFS.ReadFile("lua/finish.lua")
	if err != nil {
		panic(err)
	}
	ents, err := asynqLua.ReadDir("lua/asynq")
	if err != nil {
		panic(err)
	}
	out := map[string]*redis.Script{}
	for _, e := range ents {
		ack, err := asynqLua.ReadFile("lua/asynq/" + e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha1.Sum(ack)
		out[hex.EncodeToString(sum[:])] = redis.NewScript("-- onceq ackfold.go: Complete, then asynq's acknowledgement " + e.Name() + "\n" +
			"local function finish(KEYS, ARGV)\n" + string(finish) + "\nend\n" +
			"local function ack()" + string(ack) + "end\n" +
			"local n = #ARGV\n" +
			"local done = finish({KEYS[#KEYS]}, {ARGV[n-4], ARGV[n-3], ARGV[n-2], ARGV[n-1], ARGV[n]})\n" +
			"return {done, ack()}\n")
	}
	return out
}()

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

// FoldCompletes returns the client to give asynq.NewServerFromRedisClient
// so that each completion goes in the same script as asynq's own
// acknowledgement of the task, Complete first: three round trips per task
// instead of four. rdb must be this middleware's RedisStore's client; only
// asynq's calls through the returned client are changed. When the fold's
// assumptions do not hold (another asynq version, a Cluster client, another
// store) it returns rdb itself and why: completions stay separate round trips.
// Call it before the server starts.
//
// A completion waits at most wait (default 1s) for its acknowledgement, then
// goes alone; one that fails is retried while the lease lasts, the hold kept
// alive meanwhile; Shutdown sends what is still waiting.
func (m *Middleware) FoldCompletes(rdb redis.UniversalClient, wait time.Duration) (redis.UniversalClient, error) {
	if v := asynqVersion(); v != foldAsynqVersion {
		if v == "" {
			v = "unknown"
		}
		return rdb, fmt.Errorf("dedup: completes not folded into acks: asynq version %s, the fold is verified for %s", v, foldAsynqVersion)
	}
	c, ok := rdb.(*redis.Client)
	if !ok {
		return rdb, fmt.Errorf("dedup: completes not folded into acks: %T (a Cluster pipeline does not keep Complete ahead of the ack)", rdb)
	}
	s, ok := m.store.(*RedisStore)
	if !ok || s.rdb != rdb {
		return rdb, errors.New("dedup: completes not folded into acks: the store is not a RedisStore on the same client")
	}
	if wait <= 0 {
		wait = time.Second
	}
	f := &ackFold{m: m, store: s, rdb: c, wait: wait, pending: map[string]*pendingComplete{}}
	m.fold = f
	return foldingClient{Client: c, f: f}, nil
}

// Folded is how many completions rode in an asynq acknowledgement.
func (m *Middleware) Folded() int64 {
	if m.fold == nil {
		return 0
	}
	return m.fold.folded.Load()
}

// foldingClient is the client asynq gets: asynq runs its scripts through
// EvalSha (Eval after NOSCRIPT), so those are the only calls it changes.
type foldingClient struct {
	*redis.Client
	f *ackFold
}

func (c foldingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if p := c.f.match(sha, keys, args); p != nil {
		return c.f.send(ctx, p, sha, keys, args)
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func (c foldingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	sum := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(sum[:])
	if p := c.f.match(sha, keys, args); p != nil {
		return c.f.send(ctx, p, sha, keys, args)
	}
	return c.Client.Eval(ctx, script, keys, args...)
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
	ttl    time.Duration // done TTL; 0: the store's
	timer  *time.Timer
}

// await parks a finished run's completion for asynq's acknowledgement of
// the task in ctx. false: no task id in ctx, or a result the store will
// refuse; the caller completes as usual.
func (f *ackFold) await(ctx context.Context, h Hold, result []byte, ttl time.Duration) bool {
	id, ok := asynq.GetTaskID(ctx)
	q, ok2 := asynq.GetQueueName(ctx)
	if !ok || !ok2 || len(result) > f.store.opts.MaxResultBytes {
		return false
	}
	name := q + "\x00" + id
	p := &pendingComplete{h: h, result: result, ttl: ttl}
	f.mu.Lock()
	old := f.pending[name]
	f.pending[name] = p
	p.timer = time.AfterFunc(f.wait, func() {
		if f.take(name, p) {
			f.m.completeLater(p.h, p.result, p.ttl) // no acknowledgement came
		}
	})
	f.mu.Unlock()
	if old != nil && old.timer.Stop() {
		f.m.completeLater(old.h, old.result, old.ttl)
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
		f.m.completeLater(p.h, p.result, p.ttl)
	}
}

// match returns the completion waiting for asynq's acknowledgement of a
// task, if sha, keys and args are one.
func (f *ackFold) match(sha string, keys []string, args []any) *pendingComplete {
	if foldScripts[sha] == nil || len(keys) == 0 || len(args) == 0 {
		return nil
	}
	q, ok := strings.CutPrefix(keys[0], "asynq:{")
	q, ok2 := strings.CutSuffix(q, "}:active")
	id, _ := args[0].(string)
	if !ok || !ok2 || id == "" {
		return nil
	}
	name := q + "\x00" + id
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pending[name]
	if p == nil || !p.timer.Stop() {
		return nil // none, or its timer already sent it alone
	}
	delete(f.pending, name)
	return p
}

// send runs the completion and asynq's acknowledgement (the script sha with
// keys and args) as one script, and returns the acknowledgement's reply to
// asynq as its own script would have.
func (f *ackFold) send(ctx context.Context, p *pendingComplete, sha string, keys []string, args []any) *redis.Cmd {
	ttl := p.ttl
	if ttl == 0 {
		ttl = f.store.opts.DoneTTL
	}
	ckeys, cargs := f.store.completeArgs(p.h, p.result, ttl)
	v, err := foldScripts[sha].Run(ctx, f.rdb, append(slices.Clip(keys), ckeys...), append(slices.Clip(args), cargs...)...).Slice()
	acked := redis.NewCmd(ctx)
	var n int64
	switch {
	case err != nil:
		acked.SetErr(err) // asynq retries its acknowledgement; the completion is retried below
	case len(v) != 2:
		err = fmt.Errorf("dedup: folded acknowledgement replied %v", v)
		acked.SetErr(err)
	default:
		n, _ = v[0].(int64)
		if aerr, ok := v[1].(error); ok {
			acked.SetErr(aerr)
		} else {
			acked.SetVal(v[1])
		}
	}
	f.folded.Add(1)
	if err = f.store.finish(ctx, OpComplete, OutcomeCompleted, p.h, n, err); err != nil && !errors.Is(err, ErrLeaseLost) {
		f.m.completeLater(p.h, p.result, p.ttl) // Redis trouble: keep trying while the lease lasts
	} else {
		f.m.untrack(p.h)
	}
	return acked
}
