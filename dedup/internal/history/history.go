// Package history is the one layout of a key's history: its last
// decisions, newest first, one Redis string per key (onceq:{<home>}:ns/id:hist).
// Go builds every entry here (Pack, or Head for a script to end with the
// decision it makes), every script appends through the one Lua function
// in Lua, and Parse reads them back.
//
// An entry is one line:
//
//	<unix ms, base 36>|<way in>|<task id>|<decision>|<incarnation>|<reason>
//
// The decisions the library makes are one letter (Codes); a longer word is
// the decision itself, so a new one needs no code.
// The task id is "" for the key's own (Key.TaskID, what every job the
// Producer guards carries), the incarnation "" when unknown; only the
// reason, last, may contain '|'. A string rather than a list: on Redis 7.0
// a one-entry list costs 216 B of MEMORY USAGE, a two-entry string 152 B.
package history

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Codes are the letters of the library's decisions in an entry, which the
// scripts write as they decide (history.lua's callers): a done key's
// history stays inside the memory budget of a remembered job.
var Codes = map[string]string{
	"enqueued": "e", "duplicate": "d", "conflict": "c", "throttled": "t",
	"acquired": "a", "completed": "k", "released": "r",
}

var words = func() map[string]string {
	m := make(map[string]string, len(Codes))
	for w, c := range Codes {
		m[c] = w
	}
	return m
}()

// Keep is how many entries a key's history keeps.
const Keep = 32

//go:embed history.lua
var lua string

// Lua defines onceq_history(key, entry, ttl, how) (history.lua), to go
// first in every script that appends.
var Lua = "local HISTORY_KEEP = " + strconv.Itoa(Keep) + "\n" + lua

// How a script's append sets the history's TTL (history.lua).
const (
	TTLMax  = "max"
	TTLKeep = "keep"
	TTLDone = "done"
)

// Entry is one decision.
type Entry struct {
	At          time.Time
	Way         string // who asked: "cli", "http:alice", "worker", ...
	TaskID      string // "": the key's own
	Decision    string
	Incarnation int // 0: unknown
	Reason      string
}

// maxReason bounds a reason (a failure's cause) in an entry.
const maxReason = 120

// Head is the start of an entry that Go knows before a script decides: the
// script appends "<decision>|<incarnation>|<reason>".
func Head(at time.Time, way, taskID string) string {
	b := make([]byte, 0, 24+len(way)+len(taskID))
	b = strconv.AppendInt(b, at.UnixMilli(), 36)
	b = append(b, '|')
	b = append(b, clean(way, 64, true)...)
	b = append(b, '|')
	b = append(b, clean(taskID, 255, true)...)
	return string(append(b, '|'))
}

// Tail is the end of an entry that follows its Head: the decision, the
// incarnation (0: unknown) and the reason.
func Tail(decision string, incarnation int, reason string) string {
	inc := ""
	if incarnation > 0 {
		inc = strconv.Itoa(incarnation)
	}
	if c, ok := Codes[decision]; ok {
		decision = c
	}
	return clean(decision, 32, true) + "|" + inc + "|" + clean(reason, maxReason, false)
}

// Pack is e as its history keeps it.
func (e Entry) Pack() string {
	return Head(e.At, e.Way, e.TaskID) + Tail(e.Decision, e.Incarnation, e.Reason)
}

// clean keeps line breaks out of an entry, and '|' out of a field that is
// not last; it shortens s to n bytes.
func clean(s string, n int, field bool) string {
	if len(s) > n {
		s = s[:n]
	}
	if !strings.ContainsAny(s, "|\n\r") {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || (field && r == '|') {
			return ' '
		}
		return r
	}, s)
}

var errBad = errors.New("unreadable history entry")

// Parse reads a history as stored, newest first.
func Parse(s string) ([]Entry, error) {
	var out []Entry
	for line := range strings.SplitSeq(s, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "|", 6)
		if len(f) != 6 {
			return out, fmt.Errorf("%w: %.60q", errBad, line)
		}
		ms, err := strconv.ParseInt(f[0], 36, 64)
		if err != nil {
			return out, fmt.Errorf("%w: %.60q", errBad, line)
		}
		e := Entry{At: time.UnixMilli(ms), Way: f[1], TaskID: f[2], Decision: f[3], Reason: f[5]}
		if w, ok := words[e.Decision]; ok {
			e.Decision = w
		}
		if f[4] != "" {
			if e.Incarnation, err = strconv.Atoi(f[4]); err != nil {
				return out, fmt.Errorf("%w: %.60q", errBad, line)
			}
		}
		out = append(out, e)
	}
	return out, nil
}
