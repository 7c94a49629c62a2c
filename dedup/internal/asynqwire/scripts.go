package asynqwire

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/internal/mark"
)

// lua/asynq holds the verified asynq's scripts byte for byte (its
// internal/rdb): they are found by the SHA-1 asynq sends, so only an
// identical script is ever guarded or joined. The rest of lua/ is the
// library's own scripts that stand in for them.
//
//go:embed lua/*.lua lua/asynq/*.lua
var luaFS embed.FS

func source(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(b)
}

// asynqScript is asynq's script lua/asynq/<name> and the SHA-1 asynq sends
// for it.
func asynqScript(name string) (src, sha string) {
	src = source("asynq/" + name)
	sum := sha1.Sum([]byte(src))
	return src, hex.EncodeToString(sum[:])
}

// wrapped maps the SHA-1 of each named asynq script to one script: asynq's,
// unchanged, as the local function fn, then lua/<tail>, which calls it.
// prelude goes first.
func wrapped(prelude, fn, tail string, names ...string) map[string]*redis.Script {
	return wrappedAs(prelude, fn+"()", tail, func(src string) string { return src }, names...)
}

// wrappedAs is wrapped with fn's parameters in fn ("name(params)") and
// asynq's script passed through edit.
func wrappedAs(prelude, fn, tail string, edit func(string) string, names ...string) map[string]*redis.Script {
	out := map[string]*redis.Script{}
	for _, name := range names {
		src, sha := asynqScript(name)
		full := prelude + "local function " + fn + "\n" + edit(src) + "\nend\n" + source(tail)
		out[sha] = redis.NewScript(full)
		wrappedSource[out[sha].Hash()] = full
	}
	return out
}

// wrappedSource are the wrapped scripts' sources by their own SHA-1, for
// an EVAL where Redis answered an EVALSHA with NOSCRIPT.
var wrappedSource = map[string]string{}

var (
	// guards: asynq's enqueue and schedule, each behind lua/guard.lua,
	// with the library's fields in asynq's HSET of the task (withFields).
	guards = wrappedAs(history.Lua+mark.Read, "asynq_insert(onceq_fields)", "guard.lua", withFields, "enqueue.lua", "schedule.lua")
	// successors: asynq's enqueue and schedule, each behind
	// lua/successor.lua.
	successors = wrapped(history.Lua, "asynq_insert", "successor.lua", "enqueue.lua", "schedule.lua")
	// guardSHAs are the guards' own SHA-1s: their calls pass the hook.
	guardSHAs = func() map[string]bool {
		m := map[string]bool{}
		for _, s := range guards {
			m[s.Hash()] = true
		}
		for _, s := range successors {
			m[s.Hash()] = true
		}
		return m
	}()
	sweepScript = redis.NewScript(history.Lua + source("promote.lua") + source("sweep.lua"))
	// dequeues: lua/dequeue.lua is asynq's dequeue written out with the
	// claim; it stands in for asynq's script whole.
	dequeues = func() map[string]*redis.Script {
		_, sha := asynqScript("dequeue.lua")
		src := onDemand(history.Lua+mark.Read, "history = onceq_history, mark_get = onceq_mark_get, mark_word = onceq_mark_word") +
			source("dequeue.lua")
		s := redis.NewScript(src)
		wrappedSource[s.Hash()] = src
		return map[string]*redis.Script{sha: s}
	}()
	recoverScript = redis.NewScript(source("recover.lua"))
)

// taskHSET is how asynq's insert scripts write the task's hash: once
// each, its fields after it, up to the call's ")".
const taskHSET = `redis.call("HSET", KEYS[1],`

// withFields is asynq's insert script src whose HSET of the task's hash
// also writes the fields in onceq_fields, the guard's list (name, value,
// ...): a second HSET after asynq's insert cost a command, its reply and
// its propagation. Only asynq's scripts byte for byte are guarded (by
// SHA-1), so the edit always finds its one place.
func withFields(src string) string {
	i := strings.Index(src, taskHSET)
	j := strings.IndexByte(src[max(i, 0):], ')')
	if i < 0 || j < 0 || strings.Count(src, taskHSET) != 1 {
		panic("asynqwire: asynq's insert has no one HSET of the task: " + src) // embedded at build time
	}
	return src[:i+j] + ", unpack(onceq_fields)" + src[i+j:]
}

// onDemand defines onceq_lib(), which makes the functions lib defines and
// returns them as the table fields names ("name = function, ...").
// A script whose usual run calls none of them makes none: a closure costs
// at every run of a script that defines it, and more again in Lua's
// garbage collector (the joined dequeue's library, made at every run,
// cost 7,500 instructions of its 100,000).
func onDemand(lib, fields string) string {
	return "local function onceq_lib()\n" + lib + "return {" + fields + "}\nend\n"
}

// ackScripts maps asynq's four acknowledgement scripts to each behind
// lua/ack.lua, with finish (the library's completion script) as finish.
func ackScripts(finish string) map[string]*redis.Script {
	// kept: asynq keeps the task's hash (mark-as-complete), so the
	// library's fields leave it; done deletes it.
	prelude := history.Lua + mark.Write + "local function finish(KO, AO)\n" + finish + "\nend\n"
	m := wrapped(prelude+"local kept = false\n", "asynq_ack", "ack.lua", "done.lua", "done-unique.lua")
	maps.Copy(m, wrapped(prelude+"local kept = true\n", "asynq_ack", "ack.lua", "mark-as-complete.lua", "mark-as-complete-unique.lua"))
	return m
}

// run sends script s with the values of call after its first two (the
// command's name and the script's SHA-1, set here): a list built once by
// the caller, where go-redis's Script.Run would copy and box it again. An
// EVAL with the source follows a NOSCRIPT, as Script.Run does.
func run(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, call []any) *redis.Cmd {
	call[0], call[1] = "evalsha", s.Hash()
	cmd := redis.NewCmd(ctx, call...)
	if err := rdb.Process(ctx, cmd); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		call = slices.Clone(call)
		call[0], call[1] = "eval", wrappedSource[s.Hash()]
		cmd = redis.NewCmd(ctx, call...)
		_ = rdb.Process(ctx, cmd)
	}
	return cmd
}

// SHA is the SHA-1 asynq sends for its script lua/asynq/<name>.
func SHA(name string) string {
	_, sha := asynqScript(name)
	return sha
}
