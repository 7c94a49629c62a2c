package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/api"
)

func (e *env) job(key string, status int) api.Job {
	e.t.Helper()
	r := e.do(req{method: http.MethodGet, path: "/v1/jobs/" + url.PathEscape(key)})
	if r.Status != status {
		e.t.Fatalf("GET job %s: %d %s, want %d", key, r.Status, r.Body, status)
	}
	var j api.Job
	if status == http.StatusOK {
		dec := json.NewDecoder(bytes.NewReader(r.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			e.t.Fatalf("job %s: %v", r.Body, err)
		}
	} else {
		problem(e.t, r, status)
	}
	return j
}

func TestJobStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := accepted(t, e.post(paymentPath, paymentBody("pmt-j", "acct-j", 100), ""), http.StatusAccepted)

	j := e.job(a.Key, http.StatusOK)
	if j.Key != a.Key || j.Processed || j.State != "pending" || j.TaskState == nil || *j.TaskState != "pending" ||
		j.Queue == nil || *j.Queue != "critical" || j.Result != nil || j.CompletedAt != nil {
		t.Fatalf("enqueued job %+v", j)
	}
	// The unescaped form works too.
	r := e.do(req{method: http.MethodGet, path: "/v1/jobs/" + a.Key})
	if r.Status != http.StatusOK {
		t.Fatalf("unescaped key: %d %s", r.Status, r.Body)
	}

	k, _ := dedup.ParseKey(a.Key)
	c, err := e.jobs.Claim(t.Context(), k, "", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim %+v %v", c, err)
	}
	if err := e.jobs.Release(t.Context(), c.Hold, "gateway down"); err != nil {
		t.Fatal(err)
	}
	j = e.job(a.Key, http.StatusOK)
	if j.Processed || j.State != "pending" || j.Attempts != 1 || j.Error != "gateway down" || j.FirstSeen == nil {
		t.Fatalf("released job %+v", j)
	}

	// A job the API did not enqueue is no client's.
	other, _ := dedup.NewKey("email:send", "orphan")
	e.job(other.String(), http.StatusNotFound)
	// A record without a task (its retention ran out).
	o := accepted(t, e.post(emailPath, `{"to":"ada@example.com","subject":"s","body":"b","id":"orphan"}`, ""), http.StatusAccepted)
	if err := e.insp.DeleteTask(o.Queue, o.TaskID); err != nil {
		t.Fatal(err)
	}
	if o.Key == other.String() {
		t.Fatalf("the API's job %s is not in its client's scope", o.Key)
	}
	other, _ = dedup.ParseKey(o.Key)
	c, err = e.jobs.Claim(t.Context(), other, "", time.Minute, "")
	if err != nil || c.Outcome != dedup.Acquired {
		t.Fatalf("claim %+v %v", c, err)
	}
	if j := e.job(other.String(), http.StatusOK); j.State != "running" || j.TaskState != nil || j.Processed {
		t.Fatalf("running record %+v", j)
	}
	if err := e.jobs.Complete(t.Context(), c.Hold, []byte("not json"), 0); err != nil {
		t.Fatal(err)
	}
	if j := e.job(other.String(), http.StatusOK); j.State != "done" || !j.Processed || string(j.Result) != `"not json"` || j.CompletedAt == nil {
		t.Fatalf("done record %+v", j)
	}
}

func TestJobNotFoundAndMalformed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.job("payment:charge/never-seen", http.StatusNotFound)
	for _, bad := range []string{"no-slash", "/id", "ns/", "ns/has space", "ns/{brace}"} {
		e.job(bad, http.StatusBadRequest)
	}
}
