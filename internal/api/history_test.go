package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/onceq/onceq/internal/api"
)

// GET /v1/jobs/{key}/history shows a key's decisions, with the client
// that asked as their way in, to that client only: to another it is as
// unknown as a missing key.
func TestJobHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoClients)
	body := paymentBody("pmt-h", "acct-h", 100)
	a := accepted(t, e.do(req{path: paymentPath, body: body, header: as(aliceToken, nil)}), http.StatusAccepted)
	accepted(t, e.do(req{path: paymentPath, body: body, header: as(aliceToken, nil)}), http.StatusOK)

	get := func(tok, path string) reply {
		return e.do(req{method: http.MethodGet, path: path, header: as(tok, nil)})
	}
	for _, path := range []string{"/v1/jobs/" + url.PathEscape(a.Key) + "/history", "/v1/jobs/" + a.Key + "/history"} {
		r := get(aliceToken, path)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		var h api.History
		dec := json.NewDecoder(bytes.NewReader(r.Body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			t.Fatalf("%s: %v", r.Body, err)
		}
		if h.Key != a.Key || len(h.Entries) != 2 {
			t.Fatalf("history %s, want the enqueue and its duplicate", r.Body)
		}
		dup, first := h.Entries[0], h.Entries[1]
		if first.Decision != "enqueued" || first.Source != "http:alice" || first.TaskID != a.TaskID || first.Incarnation != 1 ||
			dup.Decision != "duplicate" || dup.Source != "http:alice" || dup.Reason != "pending" {
			t.Fatalf("history %s", r.Body)
		}
	}
	problem(t, get(bobToken, "/v1/jobs/"+url.PathEscape(a.Key)+"/history"), http.StatusNotFound)
	// A key with no history is unknown too.
	problem(t, get(aliceToken, "/v1/jobs/payment:charge%2Fnone/history"), http.StatusNotFound)
	// The job itself is still read at /v1/jobs/{key}.
	if r := get(aliceToken, "/v1/jobs/"+url.PathEscape(a.Key)); r.Status != http.StatusOK {
		t.Fatalf("GET job: %d %s", r.Status, r.Body)
	}
}
