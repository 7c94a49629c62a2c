package tasks

import (
	"fmt"
	"strings"
	"time"
)

// Repeat says what a repeat of an accepted key gets while its job has not
// started (the key-life table in the README and dedup/doc.go). Once the job
// runs, a repeat is a duplicate, or a conflict with other content, under
// every policy.
type Repeat struct {
	Policy RepeatPolicy
	// Delay (debounce): each repeat starts the job this long after itself...
	Delay time.Duration
	// MaxWait (debounce): ...but never later than this after the first.
	MaxWait time.Duration
}

// RepeatPolicy names a Repeat.
type RepeatPolicy string

const (
	// RepeatReject refuses the repeat: duplicate, or conflict with other
	// content. The default.
	RepeatReject RepeatPolicy = "reject"
	// RepeatReplace swaps a job that has not started for a repeat with other
	// content; the replaced job never runs.
	RepeatReplace RepeatPolicy = "replace"
	// RepeatDebounce swaps the job that has not started for each repeat
	// (same or other content) and starts it Delay after the latest, at most
	// MaxWait after the first. Its first job, too, starts Delay later.
	RepeatDebounce RepeatPolicy = "debounce"
)

// ParseRepeat reads "reject", "replace" or "debounce:D/M" (e.g.
// "debounce:2s/10s"), as ONCEQ_ON_REPEAT spells a policy.
func ParseRepeat(s string) (Repeat, error) {
	switch p, arg, _ := strings.Cut(s, ":"); RepeatPolicy(p) {
	case RepeatReject, RepeatReplace:
		if arg != "" {
			return Repeat{}, fmt.Errorf("tasks: repeat policy %q takes no argument", s)
		}
		return Repeat{Policy: RepeatPolicy(p)}, nil
	case RepeatDebounce:
		ds, ms, ok := strings.Cut(arg, "/")
		d, derr := time.ParseDuration(ds)
		m, merr := time.ParseDuration(ms)
		if !ok || derr != nil || merr != nil || d <= 0 || m < d {
			return Repeat{}, fmt.Errorf("tasks: repeat policy %q: want debounce:DELAY/MAXWAIT with 0 < DELAY <= MAXWAIT, e.g. debounce:2s/10s", s)
		}
		return Repeat{Policy: RepeatDebounce, Delay: d, MaxWait: m}, nil
	}
	return Repeat{}, fmt.Errorf("tasks: repeat policy %q: want reject, replace or debounce:DELAY/MAXWAIT", s)
}

func (r Repeat) String() string {
	if r.Policy == RepeatDebounce {
		return fmt.Sprintf("debounce:%s/%s", r.Delay, r.MaxWait)
	}
	if r.Policy == "" {
		return string(RepeatReject)
	}
	return string(r.Policy)
}

// ParseRepeats reads ONCEQ_ON_REPEAT: a comma list of TYPE=POLICY.
func ParseRepeats(s string) (map[string]Repeat, error) {
	out := map[string]Repeat{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		typ, pol, ok := strings.Cut(item, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("tasks: repeat policy %q: want TYPE=POLICY", item)
		}
		if _, dup := out[typ]; dup {
			return nil, fmt.Errorf("tasks: repeat policy for %q given twice", typ)
		}
		r, err := ParseRepeat(pol)
		if err != nil {
			return nil, err
		}
		out[typ] = r
	}
	return out, nil
}
