// Package mark is the one layout of a done key's compact mark: what
// remembers the key after its full record (and result) expired, until its
// done TTL ends, in tens of bytes (mark.lua says how). Go builds the
// registry key and the mark id (dedup/keys.go), and a completion's slot
// (At); every script reads and writes marks through mark.lua's Lua
// functions (Read, Write, Del).
package mark

import (
	_ "embed"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

//go:embed mark.lua
var lua string

// The parts of mark.lua, each to go first in a script that calls it, with
// onceq_marks and onceq_fpd: Read defines onceq_mark_get and
// onceq_mark_word, Write onceq_mark_put, Del onceq_mark_del. A script
// takes one, as each function it defines is a closure made at every run.
var (
	Read  = part("read")
	Write = part("write")
	Del   = part("del")
)

// part is mark.lua's first part, up to its first "-- @" line, then the one
// from "-- @<name>:" to the next.
func part(name string) string {
	base, rest, _ := strings.Cut(lua, "\n-- @")
	_, p, ok := strings.Cut("\n-- @"+rest, "\n-- @"+name+":")
	if !ok {
		panic("mark.lua has no part " + name) // embedded at build time
	}
	p, _, _ = strings.Cut(p, "\n-- @")
	return base + "\n-- @" + name + ":" + p + "\n"
}

// MaxDone is the longest done TTL a mark can carry: a bucket spans half of
// it, and a mark's offset in its bucket is 4 bytes of ms. A longer done TTL
// keeps the full record to its end.
const MaxDone = 2 * (1<<32 - 1) * time.Millisecond

// Slot is where a completion puts a key's mark, as onceq_mark_put takes
// it: the bucket's hash, named in full (the registry's name first, so the
// script makes no string of it), the field, the 4 bytes after the
// fingerprint's digest in its value, and the bucket's end (ms) and its
// time left (ms) as decimal strings.
type Slot struct{ Bucket, Field, Offset, TTL, Ends string }

// At is the slot of the mark of the key with mark id id (dedup/keys.go
// markID) under registry reg, done at now for done: the bucket of its
// expiry e, e's offset in it. onceq_mark_get (mark.lua) reads the same
// buckets.
func At(reg, id string, now time.Time, done time.Duration) Slot {
	d, ms := done.Milliseconds(), now.UnixMilli()
	g := span(d)
	e := ms + d
	b := e / g
	ends := (b + 1) * g
	// One allocation for the four strings: a completion runs this per task.
	var a [192]byte // on the stack, for a namespace up to about 80 bytes
	buf := appendHash(append(a[:0], reg...), id, d, b)
	h := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, uint32(e-b*g))
	o := len(buf)
	buf = strconv.AppendInt(buf, ends-ms, 10)
	t := len(buf)
	buf = strconv.AppendInt(buf, ends, 10)
	s := string(buf)
	return Slot{Bucket: s[:h], Field: id[4:], Offset: s[h:o], TTL: s[o:t], Ends: s[t:]}
}

// Hint is what the guard passes onceq_mark_get (mark.lua) for the done
// TTL its producer expects: Done as the registry's field, and the names of
// the 3 buckets' hashes a live mark of the key can be in, the registry's
// name first: the script then makes no string of them.
type Hint struct {
	Done    string
	Buckets [3]string
}

// Lookup is the Hint for the key with mark id id, under registry reg, at
// now, for done: the buckets from now's on, b0 to b0 + 2, as
// onceq_mark_get works them out.
func Lookup(reg, id string, now time.Time, done time.Duration) Hint {
	d := done.Milliseconds()
	b0 := now.UnixMilli() / span(d)
	var a [448]byte // on the stack, for a namespace up to about 80 bytes
	buf := strconv.AppendInt(a[:0], d, 10)
	var ends [4]int
	ends[0] = len(buf)
	for k := range 3 {
		buf = append(buf, reg...)
		buf = appendHash(buf, id, d, b0+int64(k))
		ends[k+1] = len(buf)
	}
	s := string(buf) // one allocation for the four strings
	return Hint{Done: s[:ends[0]], Buckets: [3]string{s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:]}}
}

// span is a bucket's length for a done TTL of d ms: ceil(d / 2), so a live
// mark is in one of 3 buckets and a bucket expires whole at its end.
func span(d int64) int64 { return (d + 1) / 2 }

// appendHash appends the hash, under the registry, of bucket b for a done
// TTL of d ms of the key with mark id id: "<sub>:<d>:<b>".
func appendHash(buf []byte, id string, d, b int64) []byte {
	buf = append(buf, id[:4]...)
	buf = append(buf, ':')
	buf = strconv.AppendInt(buf, d, 10)
	buf = append(buf, ':')
	return strconv.AppendInt(buf, b, 10)
}

// Used reports whether a key done for done, with its result kept for
// result, leaves a mark: only when the result goes first.
func Used(done, result time.Duration) bool {
	return result > 0 && result < done && done <= MaxDone
}
