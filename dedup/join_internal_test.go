package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// What the join holds for asynq does not outlive it: a completion no
// acknowledgement carried is recorded alone (the job stays done, its
// OnRecorded hears nil), and a claim the dequeue made for a delivery that
// never came is released so the next delivery claims at once.
func TestJoinExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, m, jc := joined(t)
	j := jc.j

	done := Key{Namespace: "join:test", ID: "parked"}
	c, err := store.Claim(ctx, done, "fp", time.Minute, "")
	if err != nil || c.Outcome != Acquired {
		t.Fatal(c.Outcome, err)
	}
	m.track(c.Hold, func(error) {})
	heard := make(chan error, 1)
	sink := &resultSink{recorded: []func(error){func(err error) { heard <- err }}}
	j.parkAs(taskName("q", "parked"), c.Hold, []byte(`"r"`), 0, sink)

	lost := Key{Namespace: "join:test", ID: "undelivered"}
	c2, err := store.Claim(ctx, lost, "fp", time.Minute, "")
	if err != nil || c2.Outcome != Acquired {
		t.Fatal(c2.Outcome, err)
	}
	j.mu.Lock()
	j.claims[taskName("q", "undelivered")] = joinedClaim{rec: recordKey(lost), acquired: true,
		hold: Hold{Token: c2.Hold.Token, Owner: c2.Hold.Owner}, at: time.Now()}
	j.mu.Unlock()

	j.expire(time.Now().Add(time.Second), time.Now().Add(time.Second))
	select {
	case err := <-heard:
		if err != nil {
			t.Fatalf("the parked completion was recorded with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked completion was never recorded")
	}
	if r, err := store.Status(ctx, done); err != nil || r.State != StatusDone || string(r.Result) != `"r"` {
		t.Errorf("parked: %s %s %v; want done with its result", r.State, r.Result, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := store.Status(ctx, lost)
		if err == nil && r.State == StatusFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("undelivered: %s %v; want released (failed), claimable at once", r.State, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	j.mu.Lock()
	left := len(j.parked) + len(j.claims)
	j.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries left in the join", left)
	}
}

// joined is a middleware on a RedisStore of a fresh database, joined to
// the client it gives asynq; it shuts down with the test.
func joined(t *testing.T) (*RedisStore, *Middleware, joiningClient) {
	t.Helper()
	rdb := redistest.Client(t)
	store, err := NewRedisStore(rdb, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMiddleware(store, MiddlewareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	c, ok := joining(rdb, store, m).(joiningClient)
	if !ok || m.join == nil {
		t.Fatal("no join on a RedisStore sharing a single client")
	}
	return store, m, c
}

// lua/dequeue.lua stands in for asynq's dequeue: on the same keys it must
// leave what asynq's own script leaves and return its message (first, for
// a guarded task), in every state a queue can be in.
func TestJoinedDequeueIsAsynqs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	asynqs, sha := asynqScript("dequeue.lua")
	ours := dequeueJoins[sha]
	if ours == nil {
		t.Fatal("no joined dequeue for asynq's script")
	}
	orig := redis.NewScript(asynqs)

	type task struct {
		id      string
		msg     string // "" leaves the hash without one
		guarded bool
	}
	cases := map[string]struct {
		pending []task
		paused  bool
	}{
		"guarded":          {pending: []task{{"g1", "m-g1", true}, {"g2", "m-g2", true}}},
		"plain":            {pending: []task{{"p1", "m-p1", false}}},
		"plain under '|'":  {pending: []task{{"a|b", "m-ab", false}}},
		"guarded '|' id":   {pending: []task{{"a|b", "m-ab", true}}},
		"hash without msg": {pending: []task{{"h1", "", true}}},
		"paused":           {pending: []task{{"p1", "m-p1", true}}, paused: true},
		"empty":            {},
	}
	for name, c := range cases {
		replies := map[string]any{}
		for _, side := range []string{"asynq", "onceq"} {
			q := side + "-" + strings.ReplaceAll(name, " ", "_")
			pfx := "asynq:{" + q + "}:"
			for _, tk := range c.pending {
				h := []any{"state", "pending", "pending_since", "1700000000000000000"}
				if tk.msg != "" {
					h = append(h, "msg", tk.msg)
				}
				if tk.guarded {
					h = append(h, "onceq_rec", "onceq:{t/"+q+tk.id+"}:rec", "onceq_fp", "fp-"+tk.id)
				}
				rdb.HSet(ctx, pfx+"t:"+tk.id, h...)
				rdb.LPush(ctx, pfx+"pending", tk.id)
			}
			if c.paused {
				rdb.Set(ctx, pfx+"paused", time.Now().Unix(), 0)
			}
			keys := []string{pfx + "pending", pfx + "paused", pfx + "active", pfx + "lease"}
			var v any
			var err error
			if side == "asynq" {
				v, err = orig.Run(ctx, rdb, keys, 1700000030, pfx+"t:").Result()
			} else {
				v, err = ours.Run(ctx, rdb, keys, 1700000030, pfx+"t:", "boot/", 17, 1700000000000, 90000, 60000).Result()
			}
			if err != nil && err != redis.Nil {
				t.Fatalf("%s, %s: %v", name, side, err)
			}
			replies[side] = v
		}
		msg := replies["onceq"]
		r, claimed := msg.([]any)
		if want := len(c.pending) > 0 && c.pending[0].guarded && c.pending[0].msg != "" && !c.paused; claimed != want {
			t.Errorf("%s: joined dequeue claimed: %v, want %v (reply %q)", name, claimed, want, msg)
		}
		if claimed {
			msg = r[0]
			q := "onceq-" + strings.ReplaceAll(name, " ", "_")
			id := c.pending[0].id // asynq pops the oldest
			rec := "onceq:{t/" + q + id + "}:rec"
			want := []any{r[0], id, int64(1), rec, "fp-" + id}
			if fmt.Sprint(r) != fmt.Sprint(want) {
				t.Errorf("%s: joined reply %q, want %q", name, r, want)
			}
			got, _ := rdb.Get(ctx, rec).Result()
			owner := "boot/" + strings.ReplaceAll(id, "|", "_")
			if w := "r|17|" + owner + "|1|1700000000000|fp-" + id + "|1700000000000|60000"; got != w {
				t.Errorf("%s: record %q, want %q", name, got, w)
			}
			if ttl := rdb.PTTL(ctx, rec).Val(); ttl <= 60*time.Second || ttl > 90*time.Second {
				t.Errorf("%s: record TTL %v, want lease and grace (90s)", name, ttl)
			}
		}
		if fmt.Sprint(msg) != fmt.Sprint(replies["asynq"]) {
			t.Errorf("%s: message %q, asynq's %q", name, msg, replies["asynq"])
		}
		a := queueState(t, rdb, "asynq-"+strings.ReplaceAll(name, " ", "_"))
		o := queueState(t, rdb, "onceq-"+strings.ReplaceAll(name, " ", "_"))
		if a != o {
			t.Errorf("%s: the queue after the joined dequeue\n%s\nafter asynq's\n%s", name, o, a)
		}
	}
}

// queueState prints every key of asynq queue q, with q's name taken out.
func queueState(t *testing.T, rdb *redis.Client, q string) string {
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "asynq:{"+q+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		var v any
		switch rdb.Type(ctx, k).Val() {
		case "list":
			v = rdb.LRange(ctx, k, 0, -1).Val()
		case "zset":
			v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		default:
			v = rdb.Get(ctx, k).Val()
		}
		fmt.Fprintf(&b, "%s = %v\n", k, v)
	}
	return strings.ReplaceAll(b.String(), q, "Q")
}

// The joined acknowledgement answers asynq in each case its script can
// end in: asynq's OK alone (record written), {0, OK} (the hold was stale:
// nothing written), {1, error} (written, asynq's task gone). asynq gets its
// own reply; the run hears ErrLeaseLost only when nothing was written.
func TestJoinedAckReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, m, c := joined(t)
	rdb := store.rdb
	_, sha := asynqScript("done.lua")
	for _, tc := range []struct {
		name       string
		stale      bool // another claim took the key after this run's
		taskGone   bool // asynq's task is not active any more
		wantDone   bool // the record ends done by this run
		wantAsynq  string
		wantRunErr error
	}{
		{name: "ok", wantDone: true, wantAsynq: "OK"},
		{name: "stale", stale: true, wantAsynq: "OK", wantRunErr: ErrLeaseLost},
		{name: "task gone", taskGone: true, wantDone: true, wantAsynq: "NOT FOUND"},
	} {
		k := Key{Namespace: "join:ack", ID: strings.ReplaceAll(tc.name, " ", "-")}
		cl, err := store.Claim(ctx, k, "fp", time.Minute, "")
		if err != nil || cl.Outcome != Acquired {
			t.Fatal(cl.Outcome, err)
		}
		if tc.stale {
			if err := store.Release(ctx, cl.Hold, "test"); err != nil {
				t.Fatal(err)
			}
			if c2, err := store.Claim(ctx, k, "fp", time.Minute, ""); err != nil || c2.Outcome != Acquired {
				t.Fatal(c2.Outcome, err)
			}
		}
		q, id := "ackq", k.TaskID()
		pfx := "asynq:{" + q + "}:"
		if !tc.taskGone {
			rdb.LPush(ctx, pfx+"active", id)
			rdb.ZAdd(ctx, pfx+"lease", redis.Z{Score: 1e10, Member: id})
			rdb.HSet(ctx, pfx+"t:"+id, "msg", "m", "state", "active")
		}
		m.track(cl.Hold, func(error) {})
		heard := make(chan error, 1)
		c.j.parkAs(taskName(q, id), cl.Hold, []byte(`"r"`), 0, &resultSink{recorded: []func(error){func(err error) { heard <- err }}})
		keys := []string{pfx + "active", pfx + "lease", pfx + "t:" + id, pfx + "processed:2026-12-04", pfx + "processed"}
		got, err := c.EvalSha(ctx, sha, keys, id, time.Now().Add(time.Hour).Unix(), int64(1<<62)).Result()
		if tc.wantAsynq == "OK" && (err != nil || got != "OK") || tc.wantAsynq != "OK" && (err == nil || !strings.Contains(err.Error(), tc.wantAsynq)) {
			t.Errorf("%s: asynq got %v, %v; want %s", tc.name, got, err, tc.wantAsynq)
		}
		if runErr := <-heard; !errors.Is(runErr, tc.wantRunErr) || (tc.wantRunErr == nil) != (runErr == nil) {
			t.Errorf("%s: the run heard %v, want %v", tc.name, runErr, tc.wantRunErr)
		}
		r, err := store.Status(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if done := r.State == StatusDone && string(r.Result) == `"r"`; done != tc.wantDone {
			t.Errorf("%s: record %s %s, want done by this run: %v", tc.name, r.State, r.Result, tc.wantDone)
		}
	}
}
