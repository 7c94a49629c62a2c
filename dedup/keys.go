package dedup

import (
	"fmt"
	"strings"

	"github.com/onceq/onceq/dedup/storage"
)

// Every Redis key onceq's engine writes is built here, as
// onceq:{<home>}:<ns/id>:<kind>. The hash tag is the key's home (shard.go):
// all keys of one idempotency key sit in one Cluster slot, the slot of the
// asynq queue its task goes to on Cluster, so each Lua call touches one
// slot. NewKey keeps '{' and '}' out of ns and id.
const keyPrefix = "onceq:"

// keyOf is the Redis key of kind ("rec", "win", ...) of k.
func keyOf(k Key, kind string) string {
	return keyPrefix + "{" + homeTag(k) + "}:" + k.Namespace + "/" + k.ID + ":" + kind
}

// recordKey is the idempotency record (a packed string, see record.go).
// Owner: the engine; it always carries a TTL (running: lease + grace, done: done TTL, failed: failed TTL).
func recordKey(k Key) string { return keyOf(k, "rec") }

// windowKey is a time window or rate rule (a string holding the holder).
// Owner: the engine; TTL: the window.
func windowKey(k Key) string { return keyOf(k, "win") }

// windowsKey is the set of the window keys (windowKey) the key's job took
// for it as holder, so that a reset finds them: the rule keys derive from
// the payload, not from the key. Only where the insert takes the windows
// itself (outside Cluster). Owner: the engine; TTL: the longest of them.
func windowsKey(k Key) string { return keyOf(k, "wins") }

// incKey is the key's next incarnation, left by a reset (Producer.Reset) so
// that the key's next job gets a new downstream key and not the reset
// one's. Owner: the engine; the next insert of the key deletes it; TTL: the
// unique window the reset cut short.
func incKey(k Key) string { return keyOf(k, "inc") }

// nextKey is the key's successor (Repeat "successor"): asynq's message of
// the job that starts when the running one ends. Owner: the engine, which
// deletes it as it starts the successor; TTL: the job's unique window.
func nextKey(k Key) string { return keyOf(k, "next") }

// successorsKey lists the keys whose successor waits (a hash: namespace/id
// -> queue), for the workers' sweep that starts them. Owner: the engine,
// which drops a key's field as it starts its successor or finds it gone.
const successorsKey = keyPrefix + "successors"

// historyKey is the key's history: its last decisions, newest first.
// Owner: the engine; TTL: as long as the key is remembered.
func historyKey(k Key) string { return keyOf(k, "hist") }

// noHistoryKey stands for the history a type does not keep (Spec.History):
// named in the key's slot, as a Cluster script may name no other, and never
// written (history.lua keeps nothing under a name ending in '}').
func noHistoryKey(k Key) string { return keyPrefix + "{" + homeTag(k) + "}" }

// liveKey is a worker process's liveness key in home h, named by its boot
// owner: it exists while the process runs. One per home, so the fast
// recoverer reads it in the step that hands a task of that home back.
// Owner: the Server, which refreshes them every third of their TTL and
// deletes them last on shutdown.
func liveKey(owner string, h int) string {
	return keyPrefix + "{" + homeTags[h] + "}:live:" + owner
}

// keyOfRecord is the inverse of recordKey.
func keyOfRecord(rec string) (Key, error) {
	s, ok := strings.CutPrefix(rec, keyPrefix+"{")
	_, s, ok1 := strings.Cut(s, "}:")
	s, ok2 := strings.CutSuffix(s, ":rec")
	if !ok || !ok1 || !ok2 {
		return Key{}, fmt.Errorf("onceq: %q is not a record key", rec)
	}
	return storage.ParseKey(s)
}
