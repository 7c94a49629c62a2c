package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"
)

// Connections that send a request head declaring 1 MiB and then nothing
// hold no webhook budget: while 40 of them wait, a sender's 20 signed
// Stripe webhooks are all accepted on the first try, and the process stays
// under 150 MB. (When room was taken from Content-Length, 40 such heads
// made most signed webhooks fail with 503.)
//
//	go test -count=1 -run TestWebhookHeadsHoldNoBudget -v ./cmd/producer/
func TestWebhookHeadsHoldNoBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and loads a producer binary")
	}
	const (
		heads    = 40
		webhooks = 20
		declared = 1 << 20
		maxPeak  = 150e6 // bytes
		secret   = "whsec_heads_test_secret"
	)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	addr, pid := serveAlone(ctx, t, map[string]string{
		"ONCEQ_WEBHOOK_SECRETS": "stripe:" + secret,
		"ONCEQ_WEBHOOK_SCHEMES": "stripe:stripe",
		// Far beyond the test: the heads must hold nothing while they wait,
		// not merely be cut off early.
		"ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT": "40s",
	})

	deadline, _ := ctx.Deadline()
	for i := range heads {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
		c.SetDeadline(deadline)
		fmt.Fprintf(c, "POST /v1/webhooks/stripe HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, declared)
	}
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	for accepted(t, pid, port) < heads && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	// Each head's handler is waiting for a first byte that never comes.
	time.Sleep(200 * time.Millisecond)

	client := &http.Client{Timeout: 10 * time.Second}
	for i := range webhooks {
		body := fmt.Sprintf(`{"id":"evt_heads_%d","object":"event","type":"customer.created","data":{"object":{"id":"cus_%d","pad":%q}}}`,
			i, i, strings.Repeat("x", 16<<10))
		sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: time.Now()})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/webhooks/stripe", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sp.Header)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("webhook %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("webhook %d while %d heads wait: %d %s", i, heads, resp.StatusCode, b)
		}
	}
	m := readMem(t, pid)
	t.Logf("%d heads waiting, %d webhooks sent: VmRSS %s, VmHWM (peak) %s", heads, webhooks, mb(m.rss), mb(m.hwm))
	if m.hwm > maxPeak {
		t.Errorf("peak RSS %s, want under %s", mb(m.hwm), mb(maxPeak))
	}
}
