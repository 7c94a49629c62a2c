package linearize

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
)

// TestRedisStoreUnderFaults records histories of the real store on a real
// redis-server while the network is cut and delayed, Redis restarts and
// clients pause past their lease, and checks each is linearizable.
// -histories and -history make the run longer.
func TestRedisStoreUnderFaults(t *testing.T) {
	r := newRig(t)
	seen := map[string]int{}
	for i := range *histories {
		seed := uint64(time.Now().UnixNano())
		name := fmt.Sprintf("h%d", i)
		ops := r.history(t, name, realStore, storeRules, *historyLen, false, seed).Operations()
		res := Check(storeRules, ops, time.Minute)
		t.Logf("history %d (seed %d): %s", i, seed, res.Report())
		if res.Verdict != porcupine.Ok {
			paths, err := res.WriteHTML(artifactDir(t, true), name)
			t.Fatalf("history %d (seed %d) is %s; HTML: %v %v\n%s", i, seed, res.Verdict, paths, err, res.Report())
		}
		count(seen, ops)
	}
	t.Logf("%d histories: %v", *histories, seen)
	// The faults and pauses must have produced what the model is about, or
	// the check proved little.
	wants := []string{"unknown", "lease lost", "in progress", "duplicate", "acquired again"}
	if storeRules.Reentrant {
		wants = append(wants, "re-entered")
	}
	for _, want := range wants {
		if seen[want] == 0 {
			t.Errorf("no %q outcome in the histories: %v", want, seen)
		}
	}
}

// count tallies the outcomes of ops by name. "re-entered" is a delivery
// acquiring a key again with the attempt it already held: only a re-entrant
// claim of a live lease keeps the attempt.
func count(seen map[string]int, ops []porcupine.Operation) {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	held := map[[2]string]int{} // key, delivery -> attempt last acquired
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == Claim && out.Outcome == dedup.Acquired && in.Delivery != "" {
			kd := [2]string{in.Key, in.Delivery}
			if held[kd] == out.Attempt {
				seen["re-entered"]++
			}
			held[kd] = out.Attempt
		}
		switch {
		case out.Unknown:
			seen["unknown"]++
		case out.LeaseLost:
			seen["lease lost"]++
		case in.Kind != Claim:
			seen[in.Kind.String()+" ok"]++
		case out.Outcome == dedup.Acquired && out.Attempt > 1:
			seen["acquired again"]++
		case out.Outcome == dedup.InProgress:
			seen["in progress"]++
		default:
			seen[string(out.Outcome)]++
		}
	}
}
