package linearize

import (
	"fmt"
	"strings"

	"github.com/onceq/onceq/dedup"
)

// Renderings of states and operations for reports and porcupine's HTML view.
// Tokens and lease ends show only their last six digits: enough to tell
// those of one history apart.

func (s state) String() string {
	if s.st == dedup.StatusUnknown {
		return "absent"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s att=%d tok=%s owner=%s", s.st, s.att, tokString(s.tok), s.owner)
	if s.fp != "" {
		fmt.Fprintf(&b, " fp=%s", s.fp)
	}
	if s.st == dedup.StatusRunning {
		fmt.Fprintf(&b, " lease=%s", leaseString(s.luLo, s.luHi))
	}
	if s.result != "" {
		fmt.Fprintf(&b, " result=%q", s.result)
	}
	if s.cause != "" {
		fmt.Fprintf(&b, " cause=%q", s.cause)
	}
	return b.String()
}

func tokString(t int64) string {
	if t == 0 {
		return "?"
	}
	return fmt.Sprint(t % 1e6)
}

func leaseString(lo, hi int64) string {
	switch {
	case lo == hi:
		return fmt.Sprint(lo % 1e6)
	case hi == Never:
		return fmt.Sprintf("[%d,∞)", lo%1e6)
	}
	return fmt.Sprintf("[%d,%d]", lo%1e6, hi%1e6)
}

// describe renders an operation for reports and the HTML view.
func describe(in Input, out Output) string {
	var args string
	switch in.Kind {
	case Claim:
		args = fmt.Sprintf("(fp=%s lease=%dms)", in.Fingerprint, in.LeaseMs)
	case Extend:
		args = fmt.Sprintf("(tok=%s lease=%dms)", tokString(in.Token), in.LeaseMs)
	case Complete, Release:
		args = fmt.Sprintf("(tok=%s %q)", tokString(in.Token), in.Value)
	}
	var res string
	switch {
	case out.Unknown:
		res = "unknown"
	case in.Kind == Claim:
		switch out.Outcome {
		case dedup.Acquired:
			res = fmt.Sprintf("acquired tok=%s att=%d lease=%s", tokString(out.Token), out.Attempt, leaseString(out.LeaseUntil, out.LeaseUntil))
		case dedup.InProgress:
			res = fmt.Sprintf("in_progress owner=%s lease=%s", out.Owner, leaseString(out.LeaseUntil, out.LeaseUntil))
		case dedup.Duplicate:
			res = fmt.Sprintf("duplicate %q", out.Result)
		default:
			res = fmt.Sprintf("%s fp=%s", out.Outcome, out.Fingerprint)
		}
	case in.Kind == Status:
		g := out.Record
		res = string(g.State)
		if g.State != dedup.StatusUnknown {
			res = fmt.Sprintf("%s att=%d tok=%s owner=%s", g.State, g.Attempts, tokString(g.Token), g.Owner)
			if g.LeaseUntil != 0 {
				res += " lease=" + leaseString(g.LeaseUntil, g.LeaseUntil)
			}
			if g.Result != "" {
				res += fmt.Sprintf(" result=%q", g.Result)
			}
			if g.Error != "" {
				res += fmt.Sprintf(" cause=%q", g.Error)
			}
		}
	case out.LeaseLost:
		res = "lease lost"
	default:
		res = "ok"
	}
	return fmt.Sprintf("%s %s%s -> %s", in.Key, in.Kind, args, res)
}
