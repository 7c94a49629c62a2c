package tasks

import (
	"testing"

	"github.com/onceq/onceq/internal/testenv"
)

// The worker's key rule for a task enqueued without onceq's headers (plain
// asynq code) is the catalog's: the same key and fingerprint the
// constructor gave the job.
func TestNewJobHeadersMatchCatalogRule(t *testing.T) {
	t.Parallel()
	e := Email{To: "bob@example.com", Subject: "a <b> & c", Body: "x", TraceID: "t"}
	j := mustJob(t)(testenv.Job(Emails.Job(e)))
	c, err := NewCatalog(Windows{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Build(TypeEmail, j.Task.Payload(), "", "")
	if err != nil || again.Key != j.Key || again.Fingerprint != j.Fingerprint {
		t.Fatalf("Build on the task payload = %v, %s, %v; want the job's %v, %s", again.Key, again.Fingerprint, err, j.Key, j.Fingerprint)
	}
	if got := string(j.Task.Payload()); got != `{"to":"bob@example.com","subject":"a <b> & c","body":"x","trace_id":"t"}` {
		t.Errorf("payload = %s; want plain JSON without HTML escapes", got)
	}
}
