package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

func TestBatchCounts(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	email := func(id string) dedup.Job {
		j, err := testenv.Job(tasks.Emails.Job(tasks.Email{ID: id, To: "a@example.com", Subject: id, Body: "."}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	r := enqueueBatch(context.Background(), p, []dedup.Job{email("email-welcome-1"), email("email-welcome-1"), email("email-report-1")})
	if r.Enqueued != 2 || r.Blocked != 1 || r.Failed != 0 || r.Outcomes[1].Decision != dedup.Duplicate {
		t.Fatalf("batch: %+v", r)
	}
}

// A task id onceq prints pastes into bash as itself: a content hash's
// "!" would otherwise be a history expansion, a "'" end a quote.
func TestShellWordPastesAsItself(t *testing.T) {
	t.Parallel()
	k, err := dedup.NewKey(tasks.TypeEmail, "~"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{k.TaskID(), "payment:charge=pmt~1", "~root", "a'b", "a b$HOME!x", "`x`", ""} {
		w := shellWord(s)
		out, err := exec.Command("bash", "-i", "-c", "printf %s "+w).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellWord(%q) = %s; bash printed %q, %v", s, w, out, err)
		}
	}
	if w := shellWord("payment:charge=pmt~20260628~001"); w != "payment:charge=pmt~20260628~001" {
		t.Errorf("a plain id was quoted: %s", w)
	}
}
