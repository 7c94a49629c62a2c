package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// clientsRoot is a scan root with a file at its top, a directory each for
// alice and bob, and a symlink in alice's that leads into bob's.
func clientsRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range map[string]string{
		"report.txt":     "the operator's\n",
		"alice/mine.txt": "alice's\n",
		"bob/secret.txt": "bob's\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../bob/secret.txt", filepath.Join(root, "alice", "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// scanAs is the task of a scan of path as the API builds it for the client
// whose scope is scope ("" for the CLI's).
func scanAs(t *testing.T, scope, path string) *asynq.Task {
	t.Helper()
	c, err := dedup.NewCatalog(Scans.Kind)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(Scan{Path: path})
	j, err := c.Build(TypeScan, b, "", scope)
	if err != nil {
		t.Fatal(err)
	}
	return j.Task
}

// A named client's scan paths resolve in its own directory: neither a file
// at the root nor another client's, by name, ".." or symlink, is read, and
// the refusal carries no hash or size. The CLI's scope resolves at the
// root; a shared root lets every client read all of it.
func TestScanPathsPerClient(t *testing.T) {
	t.Parallel()
	root := clientsRoot(t)
	for _, tc := range []struct {
		shared      bool
		scope, path string
		want        string // the file's content, "" for a refusal
	}{
		{false, "alice", "mine.txt", "alice's\n"},
		{false, "alice", "report.txt", ""},
		{false, "alice", "bob/secret.txt", ""},
		{false, "alice", "link", ""},
		{false, "alice", "alice/mine.txt", ""},
		{false, "carol", "mine.txt", ""}, // no directory of her own
		{false, "", "report.txt", "the operator's\n"},
		{false, "", "bob/secret.txt", "bob's\n"},
		{true, "alice", "report.txt", "the operator's\n"},
		{true, "alice", "bob/secret.txt", "bob's\n"},
		{true, "alice", "alice/link", "bob's\n"},
	} {
		h := ScanHandler{Scanner: &Scanner{Root: root, SharedRoot: tc.shared}}
		res, err := h.process(context.Background(), scanAs(t, tc.scope, tc.path))
		if tc.want == "" {
			if err == nil || !errors.Is(err, asynq.SkipRetry) || res != (ScanResult{}) {
				t.Errorf("shared %v, %q scans %q: %+v %v, want a permanent error and no result", tc.shared, tc.scope, tc.path, res, err)
			}
			for _, leak := range []string{sha("the operator's\n"), sha("bob's\n")} {
				if err != nil && strings.Contains(err.Error(), leak) {
					t.Errorf("%q scans %q: error %q holds a hash", tc.scope, tc.path, err)
				}
			}
			continue
		}
		if err != nil || res.SHA256 != sha(tc.want) || res.Path != tc.path {
			t.Errorf("shared %v, %q scans %q: %+v %v, want the sha of %q", tc.shared, tc.scope, tc.path, res, err, tc.want)
		}
	}
}

// The refusals say where a client's paths resolve.
func TestScanRefusalsAreClear(t *testing.T) {
	t.Parallel()
	h := ScanHandler{Scanner: &Scanner{Root: clientsRoot(t)}}
	for path, want := range map[string]string{
		"report.txt": `scan "report.txt" in client alice's directory: statat report.txt: no such file or directory`,
		"link":       `scan "link" in client alice's directory: statat link: path escapes from parent`,
	} {
		_, err := h.process(context.Background(), scanAs(t, "alice", path))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", path, err, want)
		}
	}
	_, err := h.process(context.Background(), scanAs(t, "carol", "mine.txt"))
	if want := "client carol has no directory of its own in the scan root"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("carol: %v, want %q", err, want)
	}
}

// A traversal is refused when the job is built, and by the worker for a
// task that went past the constructor under alice's key.
func TestScanTraversalFromClientDirectory(t *testing.T) {
	t.Parallel()
	c, err := dedup.NewCatalog(Scans.Kind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Build(TypeScan, []byte(`{"path":"../bob/secret.txt"}`), "", "alice"); !errors.Is(err, dedup.ErrInvalid) {
		t.Fatalf("Build: %v, want ErrInvalid", err)
	}
	k := dedup.Key{Namespace: TypeScan, ID: "alice:~" + strings.Repeat("0", 64)}
	task := keyed(asynq.NewTaskWithHeaders(TypeScan, []byte(`{"path":"../bob/secret.txt","mode":"malware"}`), map[string]string{}), k)
	h := ScanHandler{Scanner: &Scanner{Root: clientsRoot(t)}}
	if res, err := h.process(context.Background(), task); err == nil || res != (ScanResult{}) {
		t.Fatalf("past the constructor: %+v %v, want a refusal", res, err)
	}
}

// Only a scan's content key, in the CLI's scope or one client's, says where
// its paths resolve; any other key is refused rather than read at the root.
func TestScanClientFromKey(t *testing.T) {
	t.Parallel()
	hash := "~" + strings.Repeat("a", 64)
	for id, want := range map[string]string{
		hash:                           "",
		"alice:" + hash:                "alice",
		"token-0a1b2c:" + hash:         "token-0a1b2c",
		"~k" + strings.Repeat("a", 64): "!",
		"a:b:" + hash:                  "!",
		"../x:" + hash:                 "!",
		"..:" + hash:                   "!",
		".:" + hash:                    "!",
		"alice:" + hash[:10]:           "!",
		"report-1":                     "!",
	} {
		ctx := context.Background()
		var got string
		var err error
		task := keyed(asynq.NewTaskWithHeaders(TypeScan, []byte(`{"path":"x","mode":"malware"}`), map[string]string{}), dedup.Key{Namespace: TypeScan, ID: id})
		_ = dedup.Handle(Scans, func(ctx context.Context, _ Scan) (ScanResult, error) {
			got, err = scanClient(ctx)
			return ScanResult{}, nil
		}).ProcessTask(ctx, task)
		if want == "!" {
			if err == nil || !errors.Is(err, asynq.SkipRetry) {
				t.Errorf("key id %q: client %q %v, want a permanent refusal", id, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("key id %q: client %q %v, want %q", id, got, err, want)
		}
	}
}
