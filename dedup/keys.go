package dedup

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
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

// noneKey stands for a key of k's a script may name but must not use: the
// history a type does not keep (Spec.History), the marks a store does not
// write. Named in k's slot, as a Cluster script may name no other; the
// scripts take a name ending in '}' for none (history.lua, internal/mark).
func noneKey(k Key) string { return keyPrefix + "{" + homeTag(k) + "}" }

// liveKey is a worker process's liveness key in home h, named by its boot
// owner: it exists while the process runs. One per home, so the fast
// recoverer reads it in the step that hands a task of that home back.
// Owner: the Server, which refreshes them every third of their TTL and
// deletes them last on shutdown.
func liveKey(owner string, h int) string {
	return keyPrefix + "{" + homeTags[h] + "}:live:" + owner
}

// markKey is the registry of the compact marks of k's namespace under k's
// mark tag (a hash: done TTL -> the end of its latest bucket); the marks
// themselves are fields of the small hashes markKey(k)<sub>:<done TTL>:<bucket>, which
// internal/mark's Lua names from it and markID. Owner: the engine; every
// hash expires at its bucket's end, the registry with its last mark.
// Purge finds a namespace's marks by this prefix ('/' ends it: no
// namespace holds one).
func markKey(k Key) string { return keyPrefix + "{" + markTag(k) + "}:mark:" + k.Namespace + "/" }

// markPattern matches every mark key of namespace ns (SCAN MATCH), under
// any tag: its registries and their hashes.
func markPattern(ns string) string { return keyPrefix + "{*}:mark:" + globEscape(ns) + "/*" }

// markSubs is how many mark hashes share a bucket of one namespace: at 1 M
// marks in a bucket each holds about 61, under Redis's default
// hash-max-listpack-entries (128), so it stays a listpack.
const markSubs = 1 << 14

// markID is k's mark id: 4 hex digits of its sub-hash, then its 12-byte
// digest (the mark's field). Both are cut from the SHA-256 of k.String():
// 96 bits, so two keys' marks do not collide at any count Redis holds.
func markID(k Key) string {
	d := markDigest(k)
	var id [16]byte
	sub := markSub(d)
	for i := range 4 {
		id[i] = "0123456789abcdef"[sub>>(12-4*i)&0xf]
	}
	copy(id[4:], d[:12])
	return string(id[:])
}

// markFP is the digest of fingerprint fp in a compact mark: the first 4
// bytes of its SHA-1, as internal/mark's onceq_fpd builds it in Lua, which
// a completion that knows its fingerprint is spared.
func markFP(fp string) string {
	if fp == "" {
		return "\x00\x00\x00\x00"
	}
	d := sha1.Sum([]byte(fp))
	return string(d[:4])
}

// markTag is the Cluster hash tag of k's marks: its home, so that the
// scripts that read or write its record reach them in the same slot.
func markTag(k Key) string { return homeTag(k) }

func markDigest(k Key) [32]byte { return sha256.Sum256([]byte(k.String())) }

// markSub is the sub-hash within k's home: markSubs per bucket, over the
// homes.
func markSub(d [32]byte) uint16 { return binary.BigEndian.Uint16(d[12:14]) % (markSubs / homes) }

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
