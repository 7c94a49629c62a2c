package dedup_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/redistest"
)

// The fold is verified against one asynq release: bumping asynq in go.mod
// fails here until ackfold.go is checked against the new release.
func TestAckFoldPinnedToGoMod(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/hibiken/asynq (\S+)`).FindSubmatch(mod)
	if m == nil || string(m[1]) != dedup.FoldAsynqVersion {
		t.Fatalf("go.mod requires asynq %s, ackfold.go is verified for %s: re-read asynq's Done/MarkAsComplete and update both", m, dedup.FoldAsynqVersion)
	}
}

// scriptLog counts the onceq completions sent alone, the ones run in one
// script with asynq's acknowledgement, and asynq's acknowledgements sent
// without a completion.
type scriptLog struct {
	finish   string // SHA-1 of lua/finish.lua
	mu       sync.Mutex
	alone    int // completions sent on their own
	folded   int // completions run in one script with an acknowledgement
	ackAlone int // asynq scripts on the active list sent on their own
}

func newScriptLog(t *testing.T) *scriptLog {
	t.Helper()
	src, err := os.ReadFile("lua/finish.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	return &scriptLog{finish: hex.EncodeToString(sum[:])}
}

// sha is the script a command runs: EVALSHA's argument, or EVAL's source hashed.
func sha(c redis.Cmder) string {
	a := c.Args()
	if len(a) < 2 {
		return ""
	}
	s, _ := a[1].(string)
	if c.Name() == "eval" {
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	return s
}

func (l *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		err := next(ctx, c)
		a, name := c.Args(), c.Name()
		// An EVALSHA answered NOSCRIPT (a fresh Redis) is sent again as EVAL: count that one.
		if len(a) > 3 && (name == "evalsha" || name == "eval") && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			l.mu.Lock()
			switch h := sha(c); {
			case dedup.IsFoldScript(h):
				l.folded++
			case h == l.finish && a[5] == "d":
				l.alone++
			default:
				if k, _ := a[3].(string); strings.HasSuffix(k, "}:active") {
					l.ackAlone++
				}
			}
			l.mu.Unlock()
		}
		return err
	}
}
func (l *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *scriptLog) counts() (alone, folded int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alone, l.folded
}

func (l *scriptLog) acksAlone() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ackAlone
}

// foldRig is a real asynq server on a real Redis with the middleware.
type foldRig struct {
	rdb     *redis.Client // the store's client
	store   *dedup.RedisStore
	mw      *dedup.Middleware
	effects effect
}

func newFoldRig(t *testing.T) *foldRig {
	t.Helper()
	srv := redistest.Start(t)
	r := &foldRig{rdb: srv.Client(t)}
	r.store, _ = newStore(t, r.rdb, dedup.Options{})
	// Load the scripts, as any earlier task would have.
	warm := dedup.Key{Namespace: "warm", ID: "up"}
	c := mustClaim(t, r.store, warm, "", time.Minute, dedup.Acquired)
	if err := r.store.Complete(context.Background(), c.Hold, nil); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.mw, err = dedup.NewMiddleware(r.store, dedup.MiddlewareOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.mw.Shutdown(context.Background()) })
	return r
}

// run enqueues n tasks (every kind of asynq acknowledgement: with and
// without Retention and Unique) and serves them from asynqClient until each
// handler ran.
func (r *foldRig) run(t *testing.T, asynqClient redis.UniversalClient, n int) []dedup.Key {
	t.Helper()
	cl := asynq.NewClientFromRedisClient(asynqClient)
	var keys []dedup.Key
	for i := range n {
		id := fmt.Sprintf("fold-%d", i)
		var opts []asynq.Option
		if i%2 == 0 {
			opts = append(opts, asynq.Retention(time.Hour))
		}
		if i%4 < 2 {
			opts = append(opts, asynq.Unique(time.Hour))
		}
		if _, err := cl.Enqueue(asynq.NewTask("email:send", []byte(`{"id":"`+id+`"}`)), opts...); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, dedup.Key{Namespace: "email:send", ID: id})
	}
	srv := asynq.NewServerFromRedisClient(asynqClient, asynq.Config{
		Concurrency: 4, LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond,
		IsFailure: dedup.IsFailure, RetryDelayFunc: dedup.RetryDelay(nil),
	})
	mux := asynq.NewServeMux()
	mux.Use(r.mw.Wrap)
	mux.Handle("email:send", r.effects.handler("sent"))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	waitFor(t, func() bool { return r.effects.n.Load() == int64(n) })
	return keys
}

func (r *foldRig) allDone(keys []dedup.Key) bool {
	for _, k := range keys {
		if st, err := r.store.Status(context.Background(), k); err != nil || st.State != dedup.StateDone {
			return false
		}
	}
	return true
}

// The contract with asynq v0.26.0: every completion runs in one script with
// asynq's own acknowledgement, ahead of it, for each kind of acknowledgement;
// none is sent alone; asynq still counts every task processed.
func TestAckFoldContract(t *testing.T) {
	defer dedup.SetAsynqVersion(dedup.FoldAsynqVersion)() // verified by TestAckFoldPinnedToGoMod
	r := newFoldRig(t)
	asynqSide, err := r.mw.FoldCompletes(r.rdb, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	log := newScriptLog(t)
	r.rdb.AddHook(log)
	const n = 8
	keys := r.run(t, asynqSide, n)
	waitFor(t, func() bool { return r.mw.Folded() == n && r.mw.Active() == 0 })
	if !r.allDone(keys) {
		t.Fatal("a folded completion was not recorded")
	}
	if alone, folded := log.counts(); alone != 0 || folded != n {
		t.Fatalf("%d completions sent alone, %d folded into acks; want 0 and %d", alone, folded, n)
	}
	if a := log.acksAlone(); a != 0 {
		t.Fatalf("%d acknowledgements went without a completion", a)
	}
	info, err := asynq.NewInspectorFromRedisClient(r.rdb).GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	if info.Processed != n || info.Completed != n/2 || info.Active != 0 {
		t.Fatalf("asynq's side of the pipeline: %+v", info)
	}
}

// The assumption broken at start-up: another asynq version, a Cluster
// client or a store on another client turn the fold down with a reason, and
// completions stay separate round trips.
func TestAckFoldRefusesUnverified(t *testing.T) {
	r := newFoldRig(t)
	restore := dedup.SetAsynqVersion("v0.27.0")
	same, err := r.mw.FoldCompletes(r.rdb, 0)
	restore()
	if err == nil || !strings.Contains(err.Error(), "v0.27.0") || same != r.rdb {
		t.Fatalf("another asynq version: %v", err)
	}
	defer dedup.SetAsynqVersion(dedup.FoldAsynqVersion)()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{r.rdb.Options().Addr}})
	defer cluster.Close()
	if _, err := r.mw.FoldCompletes(cluster, 0); err == nil {
		t.Fatal("a Cluster client was accepted")
	}
	other := redis.NewClient(&redis.Options{Addr: r.rdb.Options().Addr})
	defer other.Close()
	if _, err := r.mw.FoldCompletes(other, 0); err == nil {
		t.Fatal("a client other than the store's was accepted")
	}
	log := newScriptLog(t)
	r.rdb.AddHook(log)
	keys := r.run(t, r.rdb, 4)
	waitFor(t, func() bool { return r.allDone(keys) })
	if alone, folded := log.counts(); alone != 4 || folded != 0 || r.mw.Folded() != 0 {
		t.Fatalf("unfolded: %d alone, %d folded", alone, folded)
	}
}

// The assumption broken at run time: asynq acknowledges in a way the fold
// does not see (here: not through the folding client). Each completion waits out
// the fold's wait and goes alone; nothing is lost and the holds are let go.
func TestAckFoldMissedAckCompletesAlone(t *testing.T) {
	defer dedup.SetAsynqVersion(dedup.FoldAsynqVersion)()
	r := newFoldRig(t)
	if _, err := r.mw.FoldCompletes(r.rdb, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	log := newScriptLog(t)
	r.rdb.AddHook(log)
	keys := r.run(t, r.rdb, 4) // not the folding client

	waitFor(t, func() bool { return r.allDone(keys) && r.mw.Active() == 0 })
	if alone, folded := log.counts(); alone != 4 || folded != 0 || log.acksAlone() != 4 {
		t.Fatalf("%d alone, %d folded, %d acks alone; want 4, 0, 4", alone, folded, log.acksAlone())
	}
}

// Shutdown sends the completions still waiting for an acknowledgement.
func TestAckFoldShutdownFlushes(t *testing.T) {
	defer dedup.SetAsynqVersion(dedup.FoldAsynqVersion)()
	r := newFoldRig(t)
	if _, err := r.mw.FoldCompletes(r.rdb, time.Hour); err != nil {
		t.Fatal(err)
	}
	keys := r.run(t, r.rdb, 3)
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	waitFor(t, func() bool { // acknowledged: each completion is waiting
		info, err := insp.GetQueueInfo("default")
		return err == nil && info.Processed == 3
	})
	for _, k := range keys {
		if st, _ := r.store.Status(context.Background(), k); st.State != dedup.StateRunning {
			t.Fatalf("%v before shutdown: %+v, want running (completion waiting)", k, st)
		}
	}
	if err := r.mw.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !r.allDone(keys) {
		t.Fatal("shutdown left completions unsent")
	}
}
