// Package mark is the one layout of a done key's compact mark: what
// remembers the key after its full record (and result) expired, until its
// done TTL ends, in tens of bytes (mark.lua says how). Go builds the
// registry key and the mark id (dedup/keys.go); every script reads and
// writes marks through the Lua functions in Lua.
package mark

import (
	_ "embed"
	"time"
)

//go:embed mark.lua
var lua string

// Lua defines onceq_marks, onceq_mark_put, onceq_mark() (get and del) and
// onceq_mark_word (mark.lua), to go first in every script that uses marks.
var Lua = lua

// MaxDone is the longest done TTL a mark can carry: a bucket spans half of
// it, and a mark's offset in its bucket is 4 bytes of ms. A longer done TTL
// keeps the full record to its end.
const MaxDone = 2 * (1<<32 - 1) * time.Millisecond

// Used reports whether a key done for done, with its result kept for
// result, leaves a mark: only when the result goes first.
func Used(done, result time.Duration) bool {
	return result > 0 && result < done && done <= MaxDone
}
