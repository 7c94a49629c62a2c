package dedup

import (
	"fmt"
	"strings"
	"time"
)

// Repeat says what a repeat of an accepted key gets while its job has not
// started (the key-life table in the README and doc.go). Once the job
// runs, a repeat is a duplicate, or a conflict with other content, under
// every policy but "successor".
type Repeat struct {
	// Policy is "reject" (or ""), the default: the repeat is a duplicate,
	// or a conflict with other content; "replace": a repeat with other
	// content swaps the job that has not started, which never runs;
	// "debounce": each repeat (same or other content) swaps it and starts
	// Delay after itself, at most MaxWait after the first, and the first
	// job, too, starts Delay later; "successor": as replace while the job
	// has not started; while it runs or waits for a retry, a repeat (same
	// content or other) waits as the key's one successor, in place of any
	// that waited, and starts as the key's next incarnation when the run
	// ends (done or failed for good); once the key is done, a repeat with
	// other content starts at once as its next incarnation. Never two runs
	// of a key at once, and the last repeat always runs. One Redis only
	// (not Cluster): the successor starts in the step that sees the run end.
	Policy string
	// Delay (debounce): each repeat starts the job this long after itself...
	Delay time.Duration
	// MaxWait (debounce): ...but never later than this after the first.
	MaxWait time.Duration
}

const (
	repeatReject    = "reject"
	repeatReplace   = "replace"
	repeatDebounce  = "debounce"
	repeatSuccessor = "successor"
)

// ParseRepeat reads "reject", "replace", "successor" or "debounce:D/M" (e.g.
// "debounce:2s/10s"), as ONCEQ_ON_REPEAT spells a policy.
func ParseRepeat(s string) (Repeat, error) {
	switch p, arg, _ := strings.Cut(s, ":"); p {
	case repeatReject, repeatReplace, repeatSuccessor:
		if arg != "" {
			return Repeat{}, fmt.Errorf("onceq: repeat policy %q takes no argument", s)
		}
		return Repeat{Policy: p}, nil
	case repeatDebounce:
		ds, ms, ok := strings.Cut(arg, "/")
		d, derr := time.ParseDuration(ds)
		m, merr := time.ParseDuration(ms)
		if !ok || derr != nil || merr != nil || d <= 0 || m < d {
			return Repeat{}, fmt.Errorf("onceq: repeat policy %q: want debounce:DELAY/MAXWAIT with 0 < DELAY <= MAXWAIT, e.g. debounce:2s/10s", s)
		}
		return Repeat{Policy: repeatDebounce, Delay: d, MaxWait: m}, nil
	}
	return Repeat{}, fmt.Errorf("onceq: repeat policy %q: want reject, replace, successor or debounce:DELAY/MAXWAIT", s)
}
