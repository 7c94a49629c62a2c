package admin_test

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/admin"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// The read-write dashboard (the dev overlay) on a real Redis: a form that
// evil.example posts with the operator's cached Basic credentials must not
// pause a queue; the dashboard's own page may; nothing may frame it.
func TestDashboardRefusesCrossOriginWrites(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("t", nil), asynq.Queue("default")); err != nil {
		t.Fatal(err)
	}
	const tok = "dashboard-token-0123"
	base := serve(t, admin.Options{Token: tok, Dashboard: dashboard(t, rdb, false)})
	basic := "Basic " + b64("op:"+tok)
	paused := func() bool {
		t.Helper()
		info, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo("default")
		if err != nil {
			t.Fatal(err)
		}
		return info.Paused
	}

	for _, h := range []map[string]string{
		{"Authorization": basic, "Origin": "https://evil.example"},
		{"Authorization": basic, "Sec-Fetch-Site": "cross-site"},
	} {
		resp, body := do(t, "POST", base+"/monitoring/api/queues/default:pause", h)
		if resp.StatusCode != http.StatusForbidden || paused() {
			t.Fatalf("cross-origin pause %v: %d %q, paused %v; want 403, not paused", h, resp.StatusCode, body, paused())
		}
	}
	host := strings.TrimPrefix(base, "http://")
	resp, body := do(t, "POST", base+"/monitoring/api/queues/default:pause",
		map[string]string{"Authorization": basic, "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusNoContent || !paused() {
		t.Fatalf("same-origin pause: %d %q, paused %v; want 204, paused", resp.StatusCode, body, paused())
	}

	resp, _ = do(t, "GET", base+"/monitoring/", map[string]string{"Authorization": basic})
	if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("dashboard frame headers: %v", resp.Header)
	}
}

// /readyz answers anyone: it names the cause, not where Redis is.
func TestReadyzHidesRedisAddress(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	srv.Stop()
	base := serve(t, admin.Options{Ready: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	resp, body := do(t, "GET", base+"/readyz", nil)
	_, port, _ := net.SplitHostPort(srv.Addr)
	if resp.StatusCode != http.StatusServiceUnavailable || body != "not ready: redis unreachable\n" || strings.Contains(body, port) {
		t.Fatalf("readyz with redis down: %d %q", resp.StatusCode, body)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
