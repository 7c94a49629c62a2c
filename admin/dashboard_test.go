package admin_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/admin"
	"github.com/onceq/onceq/internal/redistest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// TestDashboardOpensOnceqTask: asynqmon routes the task id onceq gives a
// real payment, both in its JSON API and in its task page in a browser.
func TestDashboardOpensOnceqTask(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "pmt-20260628-001/a?b#c%2F", Account: "acct-1", Amount: 4200, Currency: "EUR"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := onceq.NewProducer(rdb, store, onceq.ProducerOptions{}).Enqueue(t.Context(), j)
	if err != nil || out.Decision != onceq.Enqueued {
		t.Fatalf("enqueue: %+v %v", out, err)
	}
	base := serve(t, admin.Options{Dashboard: admin.Dashboard(rdb, true)})

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
