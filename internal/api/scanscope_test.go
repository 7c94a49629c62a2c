package api_test

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// The API builds a client's scan in its scope, and that is where the
// worker resolves the path: alice's scan of "bob/secret.txt" reads
// alice/bob/secret.txt, which is not there, and learns nothing of bob's
// file; her own file is scanned. A "client" member naming bob is refused.
func TestScanResolvesInTheClientsDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	root := t.TempDir()
	for name, data := range map[string]string{"alice/mine.txt": "alice's\n", "bob/secret.txt": "bob's\n", "top.txt": "top\n"} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := tasks.ScanHandler{Scanner: &tasks.Scanner{Root: root}}
	for _, tc := range []struct {
		tok, path string
		ok        bool
	}{
		{aliceToken, "mine.txt", true},
		{aliceToken, "bob/secret.txt", false},
		{aliceToken, "top.txt", false},
		{bobToken, "secret.txt", true},
	} {
		r := e.do(req{path: scanPath, body: `{"path":"` + tc.path + `"}`, header: as(tc.tok, nil)})
		if r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", tc.path, r.Status, r.Body)
		}
		var m struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatal(err)
		}
		err := h.ProcessTask(t.Context(), queued(t, e, m.Key))
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, asynq.SkipRetry) {
			t.Errorf("%s: worker: %v, want success %v (else a permanent refusal)", tc.path, err, tc.ok)
		}
	}
	r := e.do(req{path: scanPath, body: `{"path":"secret.txt","client":"bob"}`, header: as(aliceToken, nil)})
	problem(t, r, http.StatusBadRequest)
}

// queued is the task of key as a worker gets it: the key is on the task.
func queued(t *testing.T, e *env, key string) *asynq.Task {
	t.Helper()
	k, err := dedup.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	queues, err := e.insp.Queues()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		for _, info := range e.pending(q) {
			if info.ID == k.TaskID() {
				h := maps.Clone(info.Headers)
				if h == nil {
					h = map[string]string{}
				}
				h["onceq-key"] = k.String()
				return asynq.NewTaskWithHeaders(info.Type, info.Payload, h)
			}
		}
	}
	t.Fatalf("no pending task for %s", key)
	return nil
}
