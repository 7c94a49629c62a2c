package linearize

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
)

// Times in these histories are ms from an epoch chosen so that tokens (µs)
// and leases (ms) look like Redis's; t0 is that epoch.
const t0 = 1_700_000_000_000

type step struct {
	client    int
	call, ret int64 // ms after t0; ret < 0: unknown outcome
	in        Input
	out       Output
}

func history(steps ...step) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(steps))
	for i, s := range steps {
		s.in.Key = "ns/k"
		s.in.CallMs = t0 + s.call
		var ret int64
		if s.ret < 0 {
			s.out = Output{Unknown: true, RetMs: Never}
			ret = Never
		} else {
			s.out.RetMs = t0 + s.ret
			ret = (t0 + s.ret) * 1e6
		}
		ops[i] = porcupine.Operation{ClientId: s.client, Input: s.in, Output: s.out, Call: (t0 + s.call) * 1e6, Return: ret}
	}
	return ops
}

// claim by client c with a 1 s lease and fingerprint "f".
func claim(c int) Input {
	return Input{Kind: Claim, Fingerprint: "f", LeaseMs: 1000, Owner: owner(c), Delivery: owner(c)}
}

func owner(c int) string { return "c" + string(rune('0'+c)) }

// acquired at Redis time now (ms after t0) with a 1 s lease.
func acquired(now int64, att int) Output {
	return Output{Outcome: dedup.Acquired, Token: (t0 + now) * 1000, Attempt: att, LeaseUntil: t0 + now + 1000}
}

func inProgress(c int, leaseFrom int64) Output {
	return Output{Outcome: dedup.InProgress, Owner: owner(c), LeaseUntil: t0 + leaseFrom + 1000}
}

func fence(k Kind, acquiredAt int64, value string) Input {
	return Input{Kind: k, Token: (t0 + acquiredAt) * 1000, Value: value, LeaseMs: 1000}
}

var (
	ok        = Output{}
	leaseLost = Output{LeaseLost: true}
)

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules Rules
		want  porcupine.CheckResult
		ops   []porcupine.Operation
	}{
		{"claim, wait, complete, duplicate", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 3, 4, claim(1), inProgress(0, 1)},
			step{0, 5, 6, fence(Complete, 1, "r"), ok},
			step{1, 7, 8, claim(1), Output{Outcome: dedup.Duplicate, Result: "r"}},
		)},
		{"two acquisitions under one live lease", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 3, 4, claim(1), acquired(3, 2)},
		)},
		{"two concurrent claims both acquired", Rules{}, porcupine.Illegal, history(
			step{0, 0, 10, claim(0), acquired(4, 1)},
			step{1, 1, 9, claim(1), acquired(5, 2)},
		)},
		{"takeover after the lease, stale complete refused", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 1500, 1502, claim(1), acquired(1501, 2)},
			step{0, 1600, 1601, fence(Complete, 1, "stale"), leaseLost},
			step{1, 1700, 1701, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "f",
				Attempts: 2, Token: (t0 + 1501) * 1000, Owner: "c1", LeaseUntil: t0 + 2501}}},
		)},
		{"stale complete accepted", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 1500, 1502, claim(1), acquired(1501, 2)},
			step{0, 1600, 1601, fence(Complete, 1, "stale"), ok},
		)},
		{"takeover while the lease certainly ran", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 900, 902, claim(1), acquired(901, 2)},
		)},
		{"lost claim took effect", Rules{}, porcupine.Ok, history(
			step{0, 0, -1, claim(0), Output{}},
			step{1, 10, 12, claim(1), inProgress(0, 5)},
		)},
		{"lost claim did not take effect", Rules{}, porcupine.Ok, history(
			step{0, 0, -1, claim(0), Output{}},
			step{1, 10, 12, claim(1), acquired(11, 1)},
		)},
		{"lost claim's token is held by nobody", Rules{}, porcupine.Illegal, history(
			step{0, 0, -1, claim(0), Output{}},
			step{1, 10, 12, claim(1), inProgress(0, 5)},
			step{0, 20, 21, fence(Complete, 5, "r"), ok},
		)},
		{"lease granted before the call", Rules{}, porcupine.Illegal, history(
			step{0, 100, 102, claim(0), acquired(50, 1)},
		)},
		{"tokens go backwards", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Release, 1, "boom"), ok},
			step{1, 5, 6, claim(1), Output{Outcome: dedup.Acquired, Token: (t0 + 1) * 1000, Attempt: 2, LeaseUntil: t0 + 1005}},
		)},
		{"release's cause dropped by the next claim", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Release, 1, "boom"), ok},
			step{1, 5, 6, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusFailed, Fingerprint: "f",
				Attempts: 1, Token: (t0 + 1) * 1000, Owner: "c0", Error: "boom"}}},
			step{1, 7, 8, claim(1), acquired(7, 2)},
			step{1, 9, 10, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "f",
				Attempts: 2, Token: (t0 + 7) * 1000, Owner: "c1", LeaseUntil: t0 + 1007}}},
		)},
		{"running record reports the last cause", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Release, 1, "boom"), ok},
			step{1, 7, 8, claim(1), acquired(7, 2)},
			step{1, 9, 10, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "f",
				Attempts: 2, Token: (t0 + 7) * 1000, Owner: "c1", Error: "boom", LeaseUntil: t0 + 1007}}},
		)},
		{"mismatch reports the stored fingerprint", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Complete, 1, "r"), ok},
			step{1, 5, 6, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, Output{Outcome: dedup.Conflict, Fingerprint: "f"}},
		)},
		{"mismatch against a live lease", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 3, 4, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, Output{Outcome: dedup.Conflict, Fingerprint: "f"}},
		)},
		{"another fingerprint waits for a live lease", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 3, 4, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, inProgress(0, 1)},
		)},
		{"mismatch against a failed record", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Release, 1, "boom"), ok},
			step{1, 5, 6, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, Output{Outcome: dedup.Conflict, Fingerprint: "f"}},
		)},
		{"a failed record taken over with the new fingerprint", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, 4, fence(Release, 1, "boom"), ok},
			step{1, 5, 6, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, acquired(5, 2)},
			step{1, 7, 8, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "g",
				Attempts: 2, Token: (t0 + 5) * 1000, Owner: "c1", LeaseUntil: t0 + 1005}}},
		)},
		{"an expired lease taken over with the new fingerprint", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 1500, 1501, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, acquired(1500, 2)},
		)},
		{"mismatch on an absent key", Rules{}, porcupine.Illegal, history(
			step{1, 3, 4, Input{Kind: Claim, Fingerprint: "g", LeaseMs: 1000, Owner: "c1"}, Output{Outcome: dedup.Conflict, Fingerprint: "f"}},
		)},
		{"lost complete seen by a later claim", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 3, -1, fence(Complete, 1, "r"), Output{}},
			step{1, 10, 11, claim(1), Output{Outcome: dedup.Duplicate, Result: "r"}},
		)},
		{"extend keeps the lease past its first end", Rules{}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 800, 801, fence(Extend, 1, ""), ok},
			step{1, 1500, 1501, claim(1), inProgress(0, 800)},
		)},
		{"extended lease taken over", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 800, 801, fence(Extend, 1, ""), ok},
			step{1, 1500, 1501, claim(1), acquired(1500, 2)},
		)},
		{"lease ends reported after the replies", Rules{}, porcupine.Ok, history(
			// Redis granted at 1; the slow reply came at 20, and the store
			// reports its clock then plus the lease. A quick read later
			// reports the lease end nearly as it is.
			step{0, 0, 20, claim(0), Output{Outcome: dedup.Acquired, Token: t0 * 1000, Attempt: 1, LeaseUntil: t0 + 1020}},
			step{1, 30, 31, claim(1), inProgress(0, 1)},
			step{1, 40, 55, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "f",
				Attempts: 1, Token: t0 * 1000, Owner: "c0", LeaseUntil: t0 + 1015}}},
		)},
		{"lease read ending before it was granted", Rules{}, porcupine.Illegal, history(
			step{0, 0, 20, claim(0), Output{Outcome: dedup.Acquired, Token: t0 * 1000, Attempt: 1, LeaseUntil: t0 + 1020}},
			step{1, 30, 31, claim(1), inProgress(0, -10)},
		)},
		{"lease read ending past the latest grant", Rules{}, porcupine.Illegal, history(
			step{0, 0, 20, claim(0), Output{Outcome: dedup.Acquired, Token: t0 * 1000, Attempt: 1, LeaseUntil: t0 + 1020}},
			step{1, 30, 31, claim(1), inProgress(0, 30)},
		)},
		{"two reads of one lease too far apart", Rules{}, porcupine.Illegal, history(
			step{0, 0, 20, claim(0), Output{Outcome: dedup.Acquired, Token: t0 * 1000, Attempt: 1, LeaseUntil: t0 + 1020}},
			step{1, 30, 31, claim(1), inProgress(0, 1)},
			step{2, 40, 41, claim(2), inProgress(0, 12)},
		)},
		{"same delivery waits without the re-entrant rule", Rules{}, porcupine.Ok, history(
			step{0, 0, -1, claim(0), Output{}},
			step{0, 10, 11, claim(0), inProgress(0, 5)},
		)},
		{"same delivery re-takes its lost claim", Rules{Reentrant: true}, porcupine.Ok, history(
			step{0, 0, -1, claim(0), Output{}},
			step{0, 10, 11, claim(0), acquired(10, 1)},
			step{1, 12, 13, claim(1), inProgress(0, 10)},
			step{0, 14, 15, fence(Complete, 10, "r"), ok},
		)},
		{"re-take of a lost claim counts an attempt", Rules{Reentrant: true}, porcupine.Illegal, history(
			step{0, 0, -1, claim(0), Output{}},
			step{0, 10, 11, claim(0), acquired(10, 2)},
		)},
		{"re-take of a live lease counts an attempt", Rules{Reentrant: true}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 10, 11, claim(0), acquired(10, 2)},
		)},
		{"re-take after the lease counts one more", Rules{Reentrant: true}, porcupine.Ok, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 1500, 1501, claim(0), acquired(1500, 2)},
		)},
		{"re-take after the lease keeps the attempt", Rules{Reentrant: true}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 1500, 1501, claim(0), acquired(1500, 1)},
		)},
		{"re-take without the rule", Rules{}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{0, 10, 11, claim(0), acquired(10, 2)},
		)},
		{"another delivery cannot re-take", Rules{Reentrant: true}, porcupine.Illegal, history(
			step{0, 0, 2, claim(0), acquired(1, 1)},
			step{1, 10, 11, claim(1), acquired(10, 2)},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.rules, tc.ops, 0)
			if r.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s\n%s", r.Verdict, tc.want, r.Report())
			}
			if tc.want == porcupine.Illegal && (len(r.Minimal) == 0 || len(r.Minimal) > len(tc.ops)) {
				t.Fatalf("minimal history has %d of %d operations", len(r.Minimal), len(tc.ops))
			}
		})
	}
}

func TestReportAndHTML(t *testing.T) {
	r := Check(Rules{}, history(
		step{2, 0, 1, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusUnknown}}},
		step{0, 0, 2, claim(0), acquired(1, 1)},
		step{2, 3, 4, Input{Kind: Status}, Output{Record: Snapshot{State: dedup.StatusRunning, Fingerprint: "f",
			Attempts: 1, Token: (t0 + 1) * 1000, Owner: "c0", LeaseUntil: t0 + 1001}}},
		step{1, 1500, 1502, claim(1), acquired(1501, 2)},
		step{0, 1600, 1601, fence(Complete, 1, "stale"), ok},
	), 0)
	if r.Verdict != porcupine.Illegal {
		t.Fatalf("verdict %s, want Illegal", r.Verdict)
	}
	// The reads are not needed to show the violation.
	if len(r.Minimal) != 3 {
		t.Errorf("minimal history has %d operations, want 3:\n%s", len(r.Minimal), r.Report())
	}
	rep := r.Report()
	t.Log(rep)
	for _, want := range []string{"not linearizable", "ns/k complete(tok=1000 \"stale\") -> ok", "client 1"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	paths, err := r.WriteHTML(t.TempDir(), "stale")
	if err != nil || len(paths) != 2 {
		t.Fatalf("WriteHTML: %v %v", paths, err)
	}
}
