package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
)

// A transactional job the ledger recorded while Redis knows nothing of it
// (restarted empty): `status` and GET /v1/jobs/{key} report it done, with
// its result, from the ledger; without ONCEQ_POSTGRES_URL they cannot.
func TestStatusReadsTheLedger(t *testing.T) {
	dbURL := pgtest.New(t)
	ctx := context.Background()
	l, err := pgledger.Open(ctx, dbURL, 2, pgledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k, _ := dedup.NewKey("order:fulfil", "ord-status-1")
	if _, err := l.Run(ctx, k, "", func(context.Context, pgx.Tx) ([]byte, error) {
		return []byte(`{"order_id":"ord-status-1","shipment_ids":[7]}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))

	out, err := cli(t, "", "status", k.String())
	if err != nil || !strings.Contains(out, `"state": "unknown"`) {
		t.Fatalf("status without the ledger: %v\n%s", err, out)
	}
	t.Setenv("ONCEQ_POSTGRES_URL", dbURL)
	out, err = cli(t, "", "status", k.String())
	if err != nil || !strings.Contains(out, `"processed": true`) || !strings.Contains(out, `"state": "done"`) ||
		!strings.Contains(out, `"shipment_ids": [`) {
		t.Fatalf("status with the ledger: %v\n%s", err, out)
	}

	// The API shows a job to the client that enqueued it; this owner record
	// is what its enqueue writes (api/owner.go), with a longer life than the
	// idempotency record that Redis lost here.
	if err := rdb.Set(ctx, "onceq:{"+k.String()+"}:api-owner", "shop", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	t.Setenv("ONCEQ_API_TOKENS", "shop:tok-shop-0123456789")
	addr := startServe(t).addr
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/jobs/order:fulfil%2Ford-status-1", nil)
	req.Header.Set("Authorization", "Bearer tok-shop-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var job struct {
		Processed bool            `json:"processed"`
		State     string          `json:"state"`
		Result    json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&job); err != nil || resp.StatusCode != 200 || !job.Processed ||
		job.State != "done" || !strings.Contains(string(job.Result), "shipment_ids") {
		t.Fatalf("GET /v1/jobs: %d %+v %v", resp.StatusCode, job, err)
	}
}

// Postgres unreachable at start: serve starts and takes an email, /readyz
// says only order:fulfil is not ready, and a status read of the email needs
// no Postgres. It used to exit 1 within 0.1 s.
func TestServePostgresUnreachable(t *testing.T) {
	rdb := redistest.Client(t)
	opt := rdb.Options()
	t.Setenv("ONCEQ_REDIS_URL", fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB))
	t.Setenv("ONCEQ_POSTGRES_URL", "postgres://app:hunter2-not-logged@127.0.0.1:1/app?connect_timeout=2")
	t.Setenv("ONCEQ_API_ADDR", "127.0.0.1:0")
	s := startServe(t) // it used to end at once with Postgres unreachable
	addr, stderr := s.addr, s.logs
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz %d %q, want 200: only order:fulfil needs Postgres", resp.StatusCode, b)
		}
		if strings.Contains(string(b), "postgres unreachable: not ready: order:fulfil") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %q never named Postgres", b)
		}
	}
	resp, err := http.Post("http://"+addr+"/v1/emails", "application/json",
		strings.NewReader(`{"id":"pg-down-api-1","to":"ada@example.com","subject":"Hi","body":"."}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/emails with Postgres down: %d, want 202", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the email's job with Postgres down: %d, want 200", resp.StatusCode)
	}
	if strings.Contains(stderr.String(), "hunter2") {
		t.Fatalf("the password leaked:\n%s", stderr.String())
	}
}
