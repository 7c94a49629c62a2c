package api_test

import (
	"net/http"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// taskIDOf is the asynq task id the producer gives the job with key key.
func taskIDOf(t *testing.T, key string) string {
	t.Helper()
	k, err := dedup.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return k.TaskID()
}

// The read endpoint takes the task id the dashboard shows as well as the key.
func TestJobByTaskID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := accepted(t, e.post(paymentPath, paymentBody("pmt-tid-1", "acct-t", 100), ""), http.StatusAccepted)
	if a.TaskID != "payment:charge=pmt~tid~1" {
		t.Fatalf("task id %q, want the dashboard-routable form", a.TaskID)
	}
	j := e.job(a.TaskID, http.StatusOK)
	if j.Key != a.Key || j.State != "pending" || j.Queue == nil || *j.Queue != "critical" {
		t.Fatalf("job by task id %+v", j)
	}
	e.job("payment:charge=pmt~tid!2d1", http.StatusBadRequest) // not canonical: one key, one id
}
