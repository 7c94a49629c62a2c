package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Chromium returns the path of a headless-capable Chromium. Without one the
// test skips, unless ONCEQ_REQUIRE_REDIS=1 (CI, which installs Debian's
// chromium) makes that a failure.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
		t.Fatal("testenv: chromium required (ONCEQ_REQUIRE_REDIS=1) but not on PATH; apt-get install chromium")
	}
	t.Skip("testenv: no chromium on PATH; apt-get install chromium")
	return ""
}

// DumpDOM loads url in a fresh headless Chromium and returns the DOM after
// the page's scripts ran. The virtual-time budget lets the page's own XHRs
// finish before the dump; a screenshot lands in dir when dir is not "".
func DumpDOM(t testing.TB, url, screenshot string) string {
	t.Helper()
	bin := Chromium(t)
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--virtual-time-budget=15000"}
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		profile := filepath.Join(t.TempDir(), "profile")
		cmd := exec.CommandContext(ctx, bin, append(append(base, "--user-data-dir="+profile), args...)...)
		var errs Buffer
		cmd.Stderr = &errs
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errs.String())
		}
		return out
	}
	dom := run("--dump-dom", url)
	if screenshot != "" {
		run("--window-size=1280,900", "--screenshot="+screenshot, url)
	}
	return string(dom)
}
