package asynqwire

import (
	"strings"
	"sync"
	"time"
)

// asynq's keys of one queue (its internal/base): all carry the queue's
// hash tag, so a queue's keys share one Cluster slot.
func queuePrefix(queue string) string { return "asynq:{" + queue + "}:" }

// TaskKey is the hash of task id in queue.
func TaskKey(queue, id string) string { return queuePrefix(queue) + "t:" + id }

// ActiveKey is queue's list of tasks being processed.
func ActiveKey(queue string) string { return queuePrefix(queue) + "active" }

// LeaseKey is queue's sorted set of active tasks by lease expiry (Unix s).
func LeaseKey(queue string) string { return queuePrefix(queue) + "lease" }

// ParseTaskKey is the inverse of TaskKey; a queue name holds no '}'.
func ParseTaskKey(key string) (queue, id string, ok bool) {
	base, id, found := strings.Cut(key, "}:t:")
	queue, ok = strings.CutPrefix(base, "asynq:{")
	return queue, id, ok && found
}

// queueOf is the queue of one of its keys named suffix ("active", ...).
func queueOf(key, suffix string) (string, bool) {
	q, ok := strings.CutPrefix(key, "asynq:{")
	q, ok2 := strings.CutSuffix(q, "}:"+suffix)
	return q, ok && ok2
}

// queueStateKeys caches, per queue, the keys of the four states a guarded
// insert may find or replace its task in: every insert needs them (boxed:
// they go to go-redis as they are). One entry per queue a producer inserts
// into, never removed.
var queueStateKeys sync.Map // queue -> *[4]any

// boxedStateKeys are queue's pending, scheduled, archived and completed
// keys.
func boxedStateKeys(queue string) *[4]any {
	if ks, ok := queueStateKeys.Load(queue); ok {
		return ks.(*[4]any)
	}
	p := queuePrefix(queue)
	ks, _ := queueStateKeys.LoadOrStore(queue, &[4]any{p + "pending", p + "scheduled", p + "archived", p + "completed"})
	return ks.(*[4]any)
}

// queueDequeueKeys caches, per queue, the four keys asynq's dequeue names
// (pending, paused, active, lease), boxed for go-redis: every dequeue
// sends them. One entry per queue a worker serves, never removed.
var queueDequeueKeys sync.Map // pending key -> *[4]any

// dequeueKeys are asynq's dequeue keys, boxed once per queue; false when
// they are not four.
func dequeueKeys(keys []string) (*[4]any, bool) {
	if len(keys) != 4 {
		return nil, false
	}
	if ks, ok := queueDequeueKeys.Load(keys[0]); ok {
		if k := ks.(*[4]any); k[1] == keys[1] && k[2] == keys[2] && k[3] == keys[3] {
			return k, true
		}
	}
	ks := &[4]any{keys[0], keys[1], keys[2], keys[3]}
	queueDequeueKeys.Store(keys[0], ks)
	return ks, true
}

// stateKeys are queue's pending, scheduled, archived and completed keys.
func stateKeys(queue string) [4]string {
	b := boxedStateKeys(queue)
	return [4]string{b[0].(string), b[1].(string), b[2].(string), b[3].(string)}
}

// recoverKeys are the keys recover.lua needs of task id in queue, its
// daily stats dated now.
func recoverKeys(queue, id string, now time.Time) []string {
	p := queuePrefix(queue)
	day := now.UTC().Format("2006-01-02")
	return []string{p + "t:" + id, p + "active", p + "lease", p + "pending", p + "archived",
		p + "processed:" + day, p + "failed:" + day, p + "processed", p + "failed"}
}
