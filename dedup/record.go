package dedup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup/internal/storerule"
	"github.com/onceq/onceq/dedup/storage"
)

// The record is one Redis string, so the common first claim is a single
// SET NX PX GET. Fields are separated by '|'; only the last may contain it:
//
//	<state>|<token>|<owner>|<attempts>|<first_seen_ms>|<fingerprint>|<updated_ms>|<tail>
//
// state r (running, tail = grace ms), d (done, tail = result, updated = completed
// at) or f (failed, tail = cause). A running record lives lease + grace: its
// lease is live while PTTL > grace, so lease deadlines are Redis's own clock
// and nothing stores them. The scripts in lua/ parse the same layout.
const sep = storerule.Sep

type packed struct {
	state     byte
	token     int64
	owner     string
	attempts  int
	firstSeen int64 // ms
	fp        string
	updated   int64 // ms
	tail      string
}

func packRunning(tok int64, owner string, att int, firstSeen int64, fp string, now int64, grace time.Duration) string {
	b := make([]byte, 0, 64+len(owner)+len(fp))
	b = append(b, 'r', sep)
	b = strconv.AppendInt(b, tok, 10)
	b = append(b, sep)
	b = append(b, owner...)
	b = append(b, sep)
	b = strconv.AppendInt(b, int64(att), 10)
	b = append(b, sep)
	b = strconv.AppendInt(b, firstSeen, 10)
	b = append(b, sep)
	b = append(b, fp...)
	b = append(b, sep)
	b = strconv.AppendInt(b, now, 10)
	b = append(b, sep)
	b = strconv.AppendInt(b, grace.Milliseconds(), 10)
	return string(b)
}

// holderPrefix is what Extend, Complete and Release compare the stored
// record against: state, token and owner of the hold.
func holderPrefix(h storage.Hold) string {
	return "r|" + strconv.FormatInt(h.Token, 10) + "|" + h.Owner + "|"
}

var errBadRecord = errors.New("unreadable record")

func unpack(v string) (packed, error) {
	var f [7]string
	rest := v
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return packed{}, fmt.Errorf("%w: %.40q", errBadRecord, v)
		}
	}
	p := packed{owner: f[2], fp: f[5], tail: rest}
	if len(f[0]) != 1 || !strings.Contains("rdf", f[0]) {
		return packed{}, fmt.Errorf("%w: state %q", errBadRecord, f[0])
	}
	p.state = f[0][0]
	var errs [4]error
	p.token, errs[0] = strconv.ParseInt(f[1], 10, 64)
	att, err := strconv.Atoi(f[3])
	p.attempts, errs[1] = att, err
	p.firstSeen, errs[2] = strconv.ParseInt(f[4], 10, 64)
	p.updated, errs[3] = strconv.ParseInt(f[6], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return packed{}, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	return p, nil
}

// A script answers a key that its compact mark alone remembers with the
// mark's word in place of its record (internal/mark onceq_mark_word):
//
//	m|<1: the same content, 0: other>|<done at ms>
type markWord struct {
	same bool
	at   int64 // ms
}

// readMark reads a mark's word; false when v is a record.
func readMark(v string) (markWord, bool) {
	rest, ok := strings.CutPrefix(v, "m|")
	if !ok {
		return markWord{}, false
	}
	same, at, _ := strings.Cut(rest, "|")
	ms, _ := strconv.ParseInt(at, 10, 64)
	return markWord{same: same == "1", at: ms}, true
}

// grace is how long a running record outlives its lease.
func (p packed) grace() time.Duration {
	ms, _ := strconv.ParseInt(p.tail, 10, 64)
	return time.Duration(ms) * time.Millisecond
}

func (p packed) mismatch(fp string) bool { return storerule.Mismatch(p.fp, fp) }

// checkField keeps the separator out of fields that are not last.
var checkField = storerule.CheckField

// bootOwner names this process start (storerule.BootOwner).
var bootOwner = storerule.BootOwner

// nextToken is the token a fresh record starts with (storerule.NextToken);
// claims on an existing record take max(stored+1, this) in Lua.
var nextToken = storerule.NextToken
