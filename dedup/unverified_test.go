package dedup_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A program that links an asynq whose insert script differs from the
// verified one (a patched copy through replace, as a user's module can end
// up with) is refused by NewProducer and NewServer with an error that names
// the linked asynq and the verified ones; with AllowUnverifiedAsynq both
// run, and the Observer hears what is off. Built and run as a user's own
// module, so the check reads what that build links; its go.sum holds no
// module of the daemon's.
func TestUnverifiedAsynqIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program of its own")
	}
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", "github.com/hibiken/asynq").Output()
	if err != nil {
		t.Fatalf("go list asynq: %v", err)
	}
	dir := t.TempDir()
	patched := filepath.Join(dir, "asynq")
	copyTree(t, strings.TrimSpace(string(out)), patched)
	rdbGo := filepath.Join(patched, "internal", "rdb", "rdb.go")
	src, err := os.ReadFile(rdbGo)
	if err != nil {
		t.Fatal(err)
	}
	const at = "var enqueueCmd = redis.NewScript(`\n"
	if !strings.Contains(string(src), at) {
		t.Fatalf("%s has no enqueueCmd to patch", rdbGo)
	}
	if err := os.WriteFile(rdbGo, []byte(strings.Replace(string(src), at, at+"-- patched\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	write(t, filepath.Join(prog, "go.mod"), `module example.com/prog

go 1.26.0

require (
	github.com/hibiken/asynq v0.26.0
	github.com/onceq/onceq/dedup v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

replace github.com/onceq/onceq/dedup => `+lib+`

replace github.com/hibiken/asynq => `+patched+`
`)
	write(t, filepath.Join(prog, "main.go"), `package main

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	_, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	fmt.Println("producer:", err)
	_, err = dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{})
	fmt.Println("server:", err)
	off := func(_ context.Context, e dedup.Event) { fmt.Println("observed:", e.Op, e.Outcome, e.Reason) }
	_, err = dedup.NewProducer(rdb, nil, dedup.ProducerOptions{AllowUnverifiedAsynq: true, Observer: off})
	fmt.Println("degraded producer:", err)
	_, err = dedup.NewServer(rdb, nil, asynq.Config{}, dedup.MiddlewareOptions{AllowUnverifiedAsynq: true, Observer: off})
	fmt.Println("degraded server:", err)
}
`)
	cmd := exec.Command(gobin, "run", ".")
	cmd.Dir = prog
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	b, err := cmd.CombinedOutput()
	got := string(b)
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, got)
	}
	sum, err := os.ReadFile(filepath.Join(prog, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, daemon := range []string{"go.uber.org/zap", "prometheus", "opentelemetry", "jackc/pgx", "stripe", "go-mail",
		"asynqmon", "miniredis", "porcupine", "k8s.io", "envconfig", "httpsfv", "github.com/onceq/onceq "} {
		if strings.Contains(string(sum), daemon) {
			t.Errorf("a program of the library alone has %s in its go.sum", daemon)
		}
	}
	for _, want := range []string{
		"producer: dedup: new producer: the linked asynq is not one this release of the library verified: asynq (replaced by " + patched + ") inserts a task with a script unlike v0.26.0's",
		"server: dedup: new server: the linked asynq is not one this release of the library verified",
		"observed: enqueue off ", "no insert guard",
		"degraded producer: <nil>",
		"observed: recover off ", "no fast recoverer", "no join",
		"degraded server: <nil>",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the files under from to to, writable.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
