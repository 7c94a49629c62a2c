package asynqwire

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// lua/dequeue.lua stands in for asynq's dequeue: on the same keys it must
// leave what asynq's own script leaves and return its message (first, for
// a guarded task), in every state a queue can be in.
func TestJoinedDequeueIsAsynqs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	asynqs, sha := asynqScript("dequeue.lua")
	ours := dequeues[sha]
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
			want := []any{r[0], id, int64(1), rec, "fp-" + id, ""} // no history kept
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

// The joined dequeue makes the library's functions only in the runs that
// call them (a stale mark stamp, a key with a history): its source is one
// function, onceq_lib, then the dequeue, which defines none of its own.
func TestDequeueMakesItsLibraryOnDemand(t *testing.T) {
	_, sha := asynqScript("dequeue.lua")
	src := wrappedSource[dequeues[sha].Hash()]
	i := strings.Index(src, "\n-- asynq v0.26.0's dequeue")
	if i < 0 {
		t.Fatal("no dequeue.lua in the joined dequeue's source")
	}
	head, body := src[:i+1], src[i+1:]
	if !strings.HasPrefix(head, "local function onceq_lib()\n") || !strings.HasSuffix(head, "}\nend\n") {
		t.Errorf("the library is not made on demand: the source starts %q", head[:min(len(head), 60)])
	}
	for n, line := range strings.Split(body, "\n") {
		if code, _, _ := strings.Cut(line, "--"); strings.Contains(code, "function") {
			t.Errorf("dequeue.lua:%d defines a function at every run: %s", n+1, line)
		}
	}
}

// The joined acknowledgement hands the completion its keys and arguments
// where asynq's call put them (finish(KO, AO)): the one table it builds is
// its reply, as each table and its strings cost Redis's Lua collector too.
func TestAckBuildsNoTableForFinish(t *testing.T) {
	tables := 0
	for _, line := range strings.Split(source("ack.lua"), "\n") {
		code, _, _ := strings.Cut(line, "--")
		tables += strings.Count(code, "{")
	}
	if tables > 1 {
		t.Errorf("ack.lua builds %d tables, want its reply's alone", tables)
	}
}

// The task path's scripts define no function they never call: each is a
// closure Redis's Lua makes at every run, and collects after it.
func TestTaskPathScriptsDefineWhatTheyCall(t *testing.T) {
	finish, err := os.ReadFile("../../lua/finish.lua")
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{}
	for _, set := range []map[string]*redis.Script{guards, successors, dequeues, NewAcks(string(finish))} {
		for _, s := range set {
			scripts[s.Hash()] = wrappedSource[s.Hash()]
		}
	}
	for sha, src := range scripts {
		var code strings.Builder // without comments
		for _, line := range strings.Split(src, "\n") {
			c, _, _ := strings.Cut(line, "--")
			code.WriteString(c + "\n")
		}
		src = code.String()
		for _, line := range strings.Split(src, "\n") {
			fn, ok := strings.CutPrefix(strings.TrimSpace(line), "local function ")
			if !ok {
				continue
			}
			name := fn[:strings.IndexByte(fn, '(')]
			if strings.Count(src, name) < 2 {
				t.Errorf("script %s defines %s and never calls it", sha[:8], name)
			}
		}
	}
}
