package linearize

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
)

// Result is the verdict on one history.
type Result struct {
	// Verdict is porcupine's: Ok, Illegal, or Unknown when the search ran
	// out of time.
	Verdict porcupine.CheckResult
	// Ops is how many operations the history had, Lost how many of them
	// had an unknown outcome.
	Ops, Lost int
	// Minimal is, for an Illegal history, a short sub-history of one key
	// that is still not linearizable (see minimize).
	Minimal []porcupine.Operation

	model porcupine.Model
	info  porcupine.LinearizationInfo
	start int64
}

// Check decides whether ops are linearizable under rules, giving the search
// at most timeout (0: no limit).
func Check(rules Rules, ops []porcupine.Operation, timeout time.Duration) Result {
	m := Model(rules)
	r := Result{model: m, Ops: len(ops), start: math.MaxInt64}
	for _, op := range ops {
		r.start = min(r.start, op.Call)
		if op.Output.(Output).Unknown {
			r.Lost++
		}
	}
	r.Verdict, r.info = porcupine.CheckOperationsVerbose(m, ops, timeout)
	if r.Verdict == porcupine.Illegal {
		r.Minimal = minimize(rules, ops)
	}
	return r
}

// minimize finds the first key whose operations are not linearizable and
// cuts its history down without inventing a violation: first to the
// shortest illegal prefix in time (an operation still running at the cut
// becomes one with unknown outcome, so a legal history has only legal
// prefixes), then without each observation (a read, or a call that changed
// nothing) the violation does not need. Dropping an observation only
// loosens the history, so what remains is illegal for a reason it shows.
func minimize(rules Rules, ops []porcupine.Operation) []porcupine.Operation {
	m := Model(rules)
	m.Partition = nil
	illegal := func(part []porcupine.Operation) bool {
		return porcupine.CheckOperationsTimeout(m, part, 10*time.Second) == porcupine.Illegal
	}
	for _, part := range byKey(ops) {
		if !illegal(part) {
			continue
		}
		var cuts []int64
		for _, op := range part {
			if op.Return != math.MaxInt64 {
				cuts = append(cuts, op.Return)
			}
		}
		slices.Sort(cuts)
		// Illegal prefixes stay illegal when extended: search the first.
		i, _ := slices.BinarySearchFunc(cuts, true, func(t int64, _ bool) int {
			if illegal(prefix(part, t)) {
				return 1
			}
			return -1
		})
		if i < len(cuts) {
			part = prefix(part, cuts[i])
		}
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for i := len(part) - 1; i >= 0; i-- {
			if !observation(part[i]) {
				continue
			}
			if without := slices.Concat(part[:i], part[i+1:]); illegal(without) {
				part = without
			}
		}
		return part
	}
	return nil
}

// prefix is the history as it stood at time t.
func prefix(ops []porcupine.Operation, t int64) []porcupine.Operation {
	var p []porcupine.Operation
	for _, op := range ops {
		if op.Call > t {
			continue
		}
		if op.Return > t {
			op.Output, op.Return = Output{Unknown: true, RetMs: Never}, math.MaxInt64
		}
		p = append(p, op)
	}
	return p
}

// observation reports whether op, had it not happened, would leave the
// record as it is: a read, a claim that acquired nothing, a refused write.
func observation(op porcupine.Operation) bool {
	in, out := op.Input.(Input), op.Output.(Output)
	switch {
	case out.Unknown:
		return false
	case in.Kind == Status, out.LeaseLost:
		return true
	case in.Kind == Claim:
		return out.Outcome != dedup.Acquired
	}
	return false
}

// Report renders the minimal violating history for a person: one line per
// operation, times in ms since the history began, "?" for an unknown return.
func (r Result) Report() string {
	if r.Verdict != porcupine.Illegal {
		return fmt.Sprintf("%s: %d operations, %d with unknown outcome", r.Verdict, r.Ops, r.Lost)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "not linearizable: %d operations (%d with unknown outcome); a minimal violating history of %d:\n",
		r.Ops, r.Lost, len(r.Minimal))
	for _, op := range r.Minimal {
		ret := "?"
		if op.Return != math.MaxInt64 {
			ret = fmt.Sprintf("%9.3f", float64(op.Return-r.start)/1e6)
		}
		fmt.Fprintf(&b, "  client %-2d [%9.3f, %9s] %s\n", op.ClientId, float64(op.Call-r.start)/1e6, ret,
			describe(op.Input.(Input), op.Output.(Output)))
	}
	b.WriteString("no order of these operations, each taking effect between its call and its return, satisfies the record's specification")
	return b.String()
}

// WriteHTML writes porcupine's interactive view of the whole history to
// dir/name.html and, for an illegal one, of the minimal history to
// dir/name-minimal.html, and returns the paths written.
func (r Result) WriteHTML(dir, name string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	full := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(r.model, r.info, full); err != nil {
		return nil, err
	}
	paths := []string{full}
	if len(r.Minimal) > 0 {
		_, info := porcupine.CheckOperationsVerbose(r.model, r.Minimal, 0)
		min := filepath.Join(dir, name+"-minimal.html")
		if err := porcupine.VisualizePath(r.model, info, min); err != nil {
			return paths, err
		}
		paths = append(paths, min)
	}
	return paths, nil
}
