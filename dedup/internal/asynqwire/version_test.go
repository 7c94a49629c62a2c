package asynqwire

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The asynq the library's module requires is a verified one: bumping it in
// go.mod fails here until this package is checked against the new release
// and Verified names it.
func TestGoModRequiresAVerifiedAsynq(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/hibiken/asynq (\S+)`).FindSubmatch(mod)
	if m == nil || !slices.Contains(Verified, string(m[1])) {
		t.Fatalf("go.mod requires asynq %s, verified: %v", m, Verified)
	}
}

// The linked asynq (go.mod's, in this build) passes the run-time check: its
// insert scripts are lua/asynq's, captured from its own client.
func TestCheckPassesOnTheVerifiedAsynq(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	shas, err := capturedInserts()
	if err != nil || len(shas) != 2 || shas[0] != SHA("enqueue.lua") || shas[1] != SHA("schedule.lua") {
		t.Fatalf("captured %v %v, want the SHA-1s of lua/asynq/enqueue.lua and schedule.lua", shas, err)
	}
}

// An asynq of another version, or one whose insert scripts differ, is
// refused with an error naming what is linked and what was verified.
func TestCheckRefuses(t *testing.T) {
	if err := check(unknownVersion, []string{SHA("enqueue.lua"), SHA("schedule.lua")}, nil); err != nil {
		t.Errorf("no version recorded, verified scripts: %v, want accepted", err)
	}
	for _, tc := range []struct {
		version string
		shas    []string
		want    string
	}{
		{"v0.27.0", []string{SHA("enqueue.lua"), SHA("schedule.lua")}, "asynq v0.27.0 is linked, verified: v0.26.0"},
		{"v0.26.0", []string{"0123456789abcdef0123456789abcdef01234567"}, "inserts a task with a script unlike"},
		{"(replaced by ../asynq)", []string{SHA("enqueue.lua")}, "asynq (replaced by ../asynq) is linked"},
		{unknownVersion, []string{SHA("enqueue.lua"), "0123456789abcdef0123456789abcdef01234567"}, "inserts a task with a script unlike"},
	} {
		err := check(tc.version, tc.shas, nil)
		if !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want ErrUnverified naming %q", tc.version, tc.shas, err, tc.want)
		}
	}
}
