package linearize

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestSpinModel checks claim.pml, the claim protocol in Promela, with spin:
// safety (no two accepted completions) by exhaustive search, liveness (the
// job is eventually done) as an LTL property under weak fairness. The
// broken variants must fail, or the check proves nothing.
func TestSpinModel(t *testing.T) {
	if raceEnabled {
		t.Skip("no Go code to race-check; the plain run checks the model")
	}
	for _, tool := range []string{"spin", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
				t.Fatalf("%s required (ONCEQ_REQUIRE_REDIS=1) but not on PATH", tool)
			}
			t.Skipf("skipping: no %s on PATH (apt-get install spin)", tool)
		}
	}
	model, err := os.ReadFile("claim.pml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		defines    []string
		safe, live bool
	}{
		{"protocol", nil, true, true},
		{"re-entrant claims", []string{"-DREENTRANT"}, true, true},
		// One delivery identity in flight twice: each re-takes the claim
		// from the other, forever. Fencing still keeps one completion.
		{"re-entrant claims, one identity run twice at once", []string{"-DREENTRANT", "-DSHARED"}, true, false},
		{"completion without fencing", []string{"-DNOFENCE"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "claim.pml"), model, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, "spin", append(append([]string{"-a"}, tc.defines...), "claim.pml")...)
			run(t, dir, "cc", "-DNOCLAIM", "-o", "safety", "pan.c")
			run(t, dir, "cc", "-DNFAIR=4", "-o", "live", "pan.c")
			if got := verify(t, dir, tc.defines, "./safety", "-m200000"); got != tc.safe {
				t.Errorf("safety holds: %v, want %v", got, tc.safe)
			}
			if got := verify(t, dir, tc.defines, "./live", "-a", "-f", "-m200000"); got != tc.live {
				t.Errorf("liveness holds: %v, want %v", got, tc.live)
			}
		})
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

var panErrors = regexp.MustCompile(`errors: (\d+)`)

// verify runs a pan verifier and reports whether it found no error; for an
// error it logs spin's replay of the counterexample.
func verify(t *testing.T, dir string, defines []string, pan ...string) bool {
	t.Helper()
	out := run(t, dir, pan[0], pan[1:]...)
	m := panErrors.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%v: no error count in\n%s", pan, out)
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		return true
	}
	trail := run(t, dir, "spin", append(append([]string{"-t", "-p", "-g"}, defines...), "claim.pml")...)
	if len(trail) > 4000 {
		trail = "…" + trail[len(trail)-4000:]
	}
	t.Logf("%v found an error:\n%s\ncounterexample (end):\n%s", pan, out, trail)
	os.Remove(filepath.Join(dir, "claim.pml.trail"))
	return false
}
