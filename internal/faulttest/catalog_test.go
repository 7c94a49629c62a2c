package faulttest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// Every way in agrees on what the same job is, through the real binaries:
// a webhook event through batch and through HTTP is one job, a signed body
// re-sent under a new Idempotency-Key is no new job, a payment id reused
// with other content exits 5 with a conflict, and the genuine payment on
// the refused account and amount is then enqueued, not throttled.
func TestCatalogThroughTheBinaries(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	r := newRig(t)
	_, producerBin := binaries(t)
	vars := map[string]string{"ONCEQ_REDIS_URL": "redis://" + r.redis.Addr, "ONCEQ_ENV": "development"}
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	serveVars := map[string]string{"ONCEQ_API_ADDR": addr, "ONCEQ_API_TOKENS": "tok-0123456789abcdef",
		"ONCEQ_WEBHOOK_SECRETS": "acme:whsec-acme"}
	for k, v := range vars {
		serveVars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	serve := exec.CommandContext(ctx, producerBin, "serve")
	serve.Env = testenv.ChildEnv(serveVars)
	var log testenv.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		serve.Wait()
		if t.Failed() {
			t.Logf("producer serve log:\n%s", log.String())
		}
	})
	eventually(t, 30*time.Second, "producer serve ready", func() (bool, string) {
		resp, err := httpc.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	webhook := func(body, key string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/webhooks/acme", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.SignatureHeader, testenv.Sign("whsec-acme", time.Now(), []byte(body)))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	data := `{"user_id":"u1","email":"ada@example.com"}`
	event := func(id string) string { return `{"id":"` + id + `","type":"user.created","data":` + data + `}` }
	batchLine := func(id string) string {
		return `{"type":"webhook:process","payload":{"source":"acme","event_id":"` + id + `","type":"user.created","data":` + data + "}}\n"
	}

	// HTTP first, then the same signed body under new keys, then batch.
	if code := webhook(event("evt_1"), "delivery-1"); code != http.StatusAccepted {
		t.Fatalf("first delivery: %d", code)
	}
	for _, key := range []string{"delivery-2", "delivery-3", ""} {
		if code := webhook(event("evt_1"), key); code != http.StatusOK {
			t.Fatalf("re-sent with Idempotency-Key %q: %d, want 200 (duplicate)", key, code)
		}
	}
	out, err := runProducer(producerBin, vars, batchLine("evt_1")+batchLine("evt_2"), "batch")
	if err != nil || !strings.Contains(out, "duplicate of webhook:process/acme:evt_1") ||
		!strings.Contains(out, "batch: 1 enqueued, 1 blocked, 0 failed, 0 conflicts") {
		t.Fatalf("batch: %v\n%s", err, out)
	}
	// Batch first (evt_2), then HTTP.
	if code := webhook(event("evt_2"), "delivery-9"); code != http.StatusOK {
		t.Fatalf("evt_2 over HTTP after batch: %d, want 200 (duplicate)", code)
	}
	if n := r.tasksOfType("webhook:process"); n != 2 {
		t.Fatalf("%d webhook tasks, want 2", n)
	}

	pay := func(id, account, amount string) (string, int) {
		out, err := runProducer(producerBin, vars, "", "payment", "--payment-id", id, "--account", account,
			"--amount", amount, "--currency", "EUR")
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out, exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out, 0
	}
	for _, c := range []struct {
		id, account, amount string
		code                int
		prefix              string
	}{
		{"pmt-X", "acct-1", "4200", 0, "enqueued payment:charge/pmt-X"},
		{"pmt-X", "acct-2", "999999", 5, "conflict payment:charge/pmt-X"},
		{"pmt-Y", "acct-2", "999999", 0, "enqueued payment:charge/pmt-Y"},
	} {
		if out, code := pay(c.id, c.account, c.amount); code != c.code || !strings.HasPrefix(out, c.prefix) {
			t.Fatalf("payment %s on %s %s: exit %d, want %d\n%s", c.id, c.account, c.amount, code, c.code, out)
		}
	}
}

// tasksOfType counts the tasks of one type in every queue and state.
func (r *rig) tasksOfType(typ string) int {
	r.t.Helper()
	queues, err := r.insp.Queues()
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, q := range queues {
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
			r.insp.ListPendingTasks, r.insp.ListActiveTasks, r.insp.ListScheduledTasks,
			r.insp.ListRetryTasks, r.insp.ListArchivedTasks, r.insp.ListCompletedTasks,
		} {
			infos, err := list(q)
			if err != nil {
				r.t.Fatal(fmt.Errorf("list %s: %w", q, err))
			}
			for _, info := range infos {
				if info.Type == typ {
					n++
				}
			}
		}
	}
	return n
}
