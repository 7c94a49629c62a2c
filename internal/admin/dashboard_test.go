package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// TestDashboardOpensOnceqTask: asynqmon routes the task id onceq gives a
// real payment, both in its JSON API and in its task page in a browser.
func TestDashboardOpensOnceqTask(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-20260628-001/a?b#c%2F", Account: "acct-1", Amount: 4200, Currency: "EUR"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}).Enqueue(t.Context(), j)
	if err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("enqueue: %+v %v", out, err)
	}
	base := serve(t, admin.Options{Dashboard: dashboard(t, rdb, true)})

	resp, body := do(t, "GET", base+"/monitoring/api/queues/"+out.Queue+"/tasks/"+out.TaskID, nil)
	var task struct {
		ID, Queue, Type, Payload, State string
	}
	if err := json.Unmarshal([]byte(body), &task); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("task API for %s: %d %v\n%.300s", out.TaskID, resp.StatusCode, err, body)
	}
	if task.ID != out.TaskID || task.Type != tasks.TypePayment || !strings.Contains(task.Payload, "acct-1") {
		t.Fatalf("task API returned %+v", task)
	}

	var shot string // a second browser run: only when someone keeps it
	if dir := os.Getenv("ONCEQ_TEST_ARTIFACTS"); dir != "" {
		shot = filepath.Join(dir, "dashboard-task.png")
	}
	dom := testenv.DumpDOM(t, base+"/monitoring/queues/"+out.Queue+"/tasks/"+out.TaskID, shot)
	for _, want := range []string{out.TaskID, tasks.TypePayment, "acct-1", "4200"} {
		if !strings.Contains(dom, want) {
			t.Errorf("task page DOM lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%.3000s", dom)
	}
	t.Logf("task page of %s rendered (screenshot: %q)", out.TaskID, shot)
}

func dashboard(t *testing.T, rdb redis.UniversalClient, readOnly bool) http.Handler {
	t.Helper()
	h, err := admin.Dashboard(rdb, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// /monitoring/jobs/ opens a job by what an operator copies: the key from a
// log line or the API, or the task id from the dashboard's list, and is
// behind the dashboard's token.
func TestDashboardOpensJobByKey(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	producer, err := dedup.NewProducer(rdb, store, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []dedup.Job
	for _, j := range []dedup.Job{
		tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-1", Account: "acct-1", Amount: 4200, Currency: "EUR"}),
		tasks.Emails.Job(tasks.Email{To: "ada@example.com", Subject: "S", Body: "B"}), // a content-hash key
	} {
		j, err := testenv.Job(j)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := producer.Enqueue(t.Context(), j); err != nil || out.Decision != dedup.Enqueued {
			t.Fatalf("enqueue: %+v %v", out, err)
		}
		jobs = append(jobs, j)
	}
	const tok = "dashboard-token-0123"
	base := serve(t, admin.Options{Token: tok, Dashboard: dashboard(t, rdb, true)})
	auth := map[string]string{"Authorization": "Bearer " + tok}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	open := func(what string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/monitoring/jobs/"+what, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	for _, j := range jobs {
		page := "/monitoring/queues/" + j.Queue + "/tasks/" + j.Key.TaskID()
		for _, what := range []string{j.Key.String(), j.Key.TaskID(), " " + j.Key.String() + "\n"} {
			resp := open(url.PathEscape(what), auth)
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != page {
				t.Fatalf("open %q: %d to %q, want 302 to %q", what, resp.StatusCode, resp.Header.Get("Location"), page)
			}
		}
		// The page it sends to is the task's in asynqmon.
		resp, body := do(t, "GET", base+"/monitoring/api"+strings.TrimPrefix(page, "/monitoring"), auth)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, j.Key.TaskID()) {
			t.Fatalf("asynqmon on %s: %d %.300s", page, resp.StatusCode, body)
		}
	}
	// A key typed as is, '/' and all, in the address bar.
	if resp := open("payment:charge/pmt-1", auth); resp.StatusCode != http.StatusFound {
		t.Fatalf("unescaped key: %d", resp.StatusCode)
	}
	for what, want := range map[string]int{
		"payment:charge/pmt-2": http.StatusNotFound,   // no such job
		"not-a-key":            http.StatusBadRequest, // neither a key nor an onceq task id
	} {
		if resp := open(what, auth); resp.StatusCode != want {
			t.Errorf("open %q: %d, want %d", what, resp.StatusCode, want)
		}
	}
	if resp := open("payment:charge/pmt-1", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d, want 401", resp.StatusCode)
	}
}
