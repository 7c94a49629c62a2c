package config

import (
	"os"
	"strings"
	"testing"
)

// cleanEnv removes every ONCEQ_ variable for the test (restored after), so
// the developer's or CI's environment cannot leak in.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, Prefix+"_") {
			t.Setenv(name, value) // registers the restore
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// setEnv starts from a clean environment and sets env.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	cleanEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// wantErr fails unless err is non-nil and mentions every part of want.
func wantErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err, w)
		}
	}
	if !strings.HasPrefix(err.Error(), "config: ") {
		t.Fatalf("error %q lacks the config: prefix", err)
	}
}
