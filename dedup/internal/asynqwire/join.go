package asynqwire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/mark"
)

// The worker's join: asynq's dequeue runs as lua/dequeue.lua, which claims
// the task it pops, and asynq's acknowledgement behind lua/ack.lua, which
// records the completion first, each in asynq's own call.

// DequeueCall reports whether an EVALSHA of sha with keys and args is
// asynq's dequeue of one queue, and whether sha is the verified script the
// join stands in for.
func DequeueCall(sha string, keys []string, args []any) (queue string, known, ok bool) {
	if len(keys) != 4 || len(args) != 2 || !strings.HasSuffix(keys[1], "}:paused") {
		return "", false, false
	}
	queue, ok = queueOf(keys[0], "pending")
	return queue, dequeues[sha] != nil, ok
}

// Claim is what the joined dequeue writes into an absent record: a running
// claim held by OwnerPrefix + the task id ('|' as '_').
type Claim struct {
	OwnerPrefix string
	Token       int64
	Now         time.Time
	// TTL is the running record's: lease and grace; Grace how long it
	// outlives its lease.
	TTL, Grace time.Duration
	// Head starts the history entry of a claim (internal/history.Head).
	Head string
	// Fresh: a task the producer's guard checked less than Fresh ago has
	// its key's compact marks left unread (lua/dequeue.lua ARGV[9]).
	Fresh time.Duration
	// fixed: OwnerPrefix, TTL and Grace (ms) as go-redis takes them, boxed
	// once (Fixed) rather than for every dequeue.
	fixed *[3]any
}

// Fixed is c with the values every dequeue sends alike boxed once.
func (c Claim) Fixed() Claim {
	c.fixed = &[3]any{c.OwnerPrefix, c.TTL.Milliseconds(), c.Grace.Milliseconds()}
	return c
}

// Dequeued is a task the joined dequeue popped.
type Dequeued struct {
	Msg, ID string
	// Record is the task's record key, "" when the task is not a guarded
	// one (nothing claimed; the middleware claims).
	Record string
	// Claimed: the record was absent and is now running; Found is then the
	// job's fingerprint, else the record as found.
	Claimed bool
	Found   string
	// History is the key's history when Claimed: "" when its producer
	// started none.
	History string
	// Plain is set when the script could not run here (an older Redis):
	// Msg is asynq's own dequeue's reply.
	Plain bool
}

// Dequeue runs the joined dequeue for asynq's call (sha, keys, args); its
// error is redis.Nil when the queue is empty, as asynq's.
func Dequeue(ctx context.Context, rdb redis.UniversalClient, sha string, keys []string, args []any, c Claim) (Dequeued, error) {
	fresh := "9999999999999" // always read marks
	if c.Fresh > 0 {
		fresh = strconv.FormatInt(c.Now.Add(-c.Fresh).UnixMilli(), 10)
	}
	k, ok := dequeueKeys(keys)
	if !ok {
		return Dequeued{}, fmt.Errorf("dedup: joined dequeue of keys %q", keys)
	}
	if c.fixed == nil {
		c = c.Fixed()
	}
	v, err := run(ctx, rdb, dequeues[sha], []any{nil, nil, 4, k[0], k[1], k[2], k[3], args[0], args[1], c.fixed[0],
		c.Token, c.Now.UnixMilli(), c.fixed[1], c.fixed[2], c.Head, fresh}).Result()
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) && strings.Contains(err.Error(), "script") {
		// This Redis cannot run the joined script: asynq's own, once.
		msg, err := rdb.EvalSha(ctx, sha, keys, args...).Text()
		return Dequeued{Msg: msg, Plain: true}, err
	}
	if err != nil {
		return Dequeued{}, err
	}
	switch r := v.(type) {
	case string:
		return Dequeued{Msg: r}, nil // not a guarded task
	case []any:
		if len(r) != 5 && len(r) != 6 {
			break
		}
		str := func(i int) string {
			if i >= len(r) {
				return ""
			}
			s, _ := r[i].(string)
			return s
		}
		flag, _ := r[2].(int64)
		return Dequeued{Msg: str(0), ID: str(1), Claimed: flag == 1, Record: str(3), Found: str(4), History: str(5)}, nil
	}
	return Dequeued{}, fmt.Errorf("dedup: joined dequeue replied %v", v)
}

// AckCall reports whether keys and args are asynq's acknowledgement of
// task id in queue (KEYS[1] the queue's active list, ARGV[1] the id).
func AckCall(keys []string, args []any) (queue, id string, ok bool) {
	if len(keys) == 0 || len(args) == 0 {
		return "", "", false
	}
	queue, ok = queueOf(keys[0], "active")
	id, ok2 := args[0].(string)
	return queue, id, ok && ok2
}

// Acks are asynq's acknowledgement scripts, each behind lua/ack.lua with
// the library's completion script.
type Acks map[string]*redis.Script

// NewAcks builds the joined acknowledgements around finish, the library's
// completion script (KEYS[1] the record, KEYS[2] the history, KEYS[3] the
// mark registry; ARGV holder prefix, state, now ms, result, TTL ms,
// history entry, the mark's bucket, result TTL ms, fingerprint digest, the
// rest of the mark's slot: field, offset, time left, end).
func NewAcks(finish string) Acks { return ackScripts(finish) }

// Completion is the library's side of a joined acknowledgement.
type Completion struct {
	// History is the key's history, Entry the completion's entry in it.
	Record, Holder, History, Entry string
	Now                            time.Time
	Result                         []byte
	TTL                            time.Duration
	// Marks and Mark are the key's compact mark registry and the slot of
	// its mark (dedup/internal/mark): the record lives ResultTTL, the mark
	// to TTL. Marks "": no mark, and ResultTTL is TTL.
	Marks     string
	Mark      mark.Slot
	ResultTTL time.Duration
	// MarkFP is the digest of the run's fingerprint in its mark
	// (internal/mark onceq_fpd); "": the script reads it from the record.
	MarkFP string
}

// Run runs asynq's acknowledgement (sha, keys, args) of task id with the
// completion c first: written is 1 when the record was written, 0 when its
// lease was lost; reply is asynq's script's reply (an error value when
// asynq's script failed). A copy of the task asynq retains drops its
// payload: the record answers repeats.
func (a Acks) Run(ctx context.Context, rdb redis.UniversalClient, sha string, keys []string, args []any, c Completion) (written int64, reply any, err error) {
	queue, id, _ := AckCall(keys, args)
	args = args[:len(args):len(args)]
	task := keys[0]     // done deletes the task's hash: ack.lua reads no name of it
	if len(args) == 5 { // mark-as-complete: ARGV[4] is the copy asynq retains
		if msg, ok := args[3].([]byte); ok {
			args[3] = WithoutPayload(msg)
		}
		task = TaskKey(queue, id) // whose onceq fields ack.lua deletes
	}
	call := make([]any, 0, 3+len(keys)+4+len(args)+13)
	call = append(call, nil, nil, len(keys)+4)
	for _, k := range keys {
		call = append(call, k)
	}
	call = append(call, task, c.Record, c.History, c.Marks)
	call = append(call, args...)
	call = append(call, c.Holder, "d", c.Now.UnixMilli(), c.Result, c.TTL.Milliseconds(), c.Entry,
		c.Mark.Bucket, c.ResultTTL.Milliseconds(), c.MarkFP, c.Mark.Field, c.Mark.Offset, c.Mark.TTL, c.Mark.Ends)
	v, err := run(ctx, rdb, a[sha], call).Result()
	if err != nil {
		return 0, nil, err
	}
	if r, ok := v.([]any); ok && len(r) == 2 {
		n, _ := r[0].(int64)
		return n, r[1], nil
	}
	if _, ok := v.(string); ok {
		return 1, v, nil // asynq's OK alone: the record was written
	}
	return 0, nil, fmt.Errorf("dedup: joined acknowledgement replied %v", v)
}

// Known reports whether sha is one of asynq's verified acknowledgements.
func (a Acks) Known(sha string) bool { return a[sha] != nil }
