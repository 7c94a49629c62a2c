// Package testenv holds what tests of real processes and servers share
// besides Redis (see redistest): free loopback ports, the environment of a
// child binary, a buffer that loggers and pipes may write while the test
// reads, a webhook sender's signature, and the repository's root.
package testenv

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// RepoRoot is the repository's root, the daemon module's directory: the
// first go.mod above the working directory of a test in that module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ChildEnv is this process's environment without any ONCEQ_ variable, plus
// vars: for a onceq binary a test starts, whose config refuses unknown
// ONCEQ_ variables (ONCEQ_FAULT_TESTS is one) and must see only the test's.
func ChildEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ONCEQ_") {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// RequireRebindRefused sends method url as a page whose DNS name was
// pointed at the server (DNS rebinding) would, Host and all, and fails
// unless a tokenless loopback server refuses it with 421.
func RequireRebindRefused(t testing.TB, method, url string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
	req.Host = "rebind.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("%s %s with a rebound Host: %d, want 421", method, url, resp.StatusCode)
	}
}

// Sign signs body as a sender of the onceq webhook scheme does
// (Onceq-Signature: "t=<unix>,v1=<hex>"): the hex HMAC-SHA256, keyed by
// secret, of "<unix seconds>.<body>". Written apart from the API's check.
func Sign(secret string, t time.Time, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", t.Unix(), body)
	return fmt.Sprintf("t=%d,v1=%x", t.Unix(), m.Sum(nil))
}
