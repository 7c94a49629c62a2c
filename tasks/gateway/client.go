package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// maxResponse bounds what is read of a gateway response.
const maxResponse = 1 << 20

// defaultHTTP is Client.HTTP when nil: http.DefaultClient has no timeout,
// and a hung gateway must not hold a worker until the task deadline.
var defaultHTTP = &http.Client{Timeout: 30 * time.Second}

// Client is the tasks.Gateway on a gateway speaking the protocol of this
// package (Server, or any other). Safe for concurrent use.
type Client struct {
	URL   string // base URL; the charge endpoint is URL + "/v1/charges"
	Token string // bearer token; empty sends none
	// HTTP is the client to use. Default: one with a 30s timeout.
	HTTP *http.Client
}

var _ tasks.Gateway = (*Client)(nil)

// Error is a non-2xx gateway response.
type Error struct {
	StatusCode int
	Detail     string
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Detail)
}

// Retryable reports whether the same request may succeed later: the first
// request with the key is still in flight (409), rate limiting (429), a
// timeout (408) or a server error.
func (e *Error) Retryable() bool {
	switch e.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return true
	}
	return e.StatusCode >= 500
}

// Charge asks the gateway to charge p once under idempotency key. Network
// errors and retryable statuses return plain errors, so asynq retries with
// the same key; other refusals (422: key reused with another payment, 400,
// 401) wrap asynq.SkipRetry and an *Error.
func (g *Client) Charge(ctx context.Context, key string, p tasks.Payment) (tasks.Charge, error) {
	if g.URL == "" {
		return tasks.Charge{}, errors.New("gateway: no URL")
	}
	if key == "" {
		return tasks.Charge{}, fmt.Errorf("gateway: %w: empty idempotency key", dedup.ErrInvalid)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return tasks.Charge{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(g.URL, "/")+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return tasks.Charge{}, fmt.Errorf("gateway: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if g.Token != "" {
		req.Header.Set("Authorization", "Bearer "+g.Token)
	}
	client := g.HTTP
	if client == nil {
		client = defaultHTTP
	}
	resp, err := client.Do(req)
	if err != nil {
		return tasks.Charge{}, fmt.Errorf("gateway: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return tasks.Charge{}, fmt.Errorf("gateway: reading response: %w", err)
	}
	if len(data) > maxResponse {
		return tasks.Charge{}, fmt.Errorf("gateway: response over %d bytes", maxResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		gerr := &Error{StatusCode: resp.StatusCode, Detail: problemDetail(data)}
		if gerr.Retryable() {
			return tasks.Charge{}, gerr
		}
		return tasks.Charge{}, fmt.Errorf("%w: %w", gerr, asynq.SkipRetry)
	}
	c, ok := decodeCharge(data)
	if !ok {
		// The charge may exist: retry, and the same key replays it.
		return tasks.Charge{}, fmt.Errorf("gateway: %d response is not a charge (no \"id\" or \"charge_id\"): %q", resp.StatusCode, truncate(data, 200))
	}
	c.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return c, nil
}

// decodeCharge reads a 2xx gateway body: a JSON object naming the charge by
// "id" (as Stripe and most gateways do) or "charge_id", a string or a number.
// Lenient beyond that: the money has moved, so an extra field or an amount
// of another type must not turn the answer into a retry.
func decodeCharge(data []byte) (tasks.Charge, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return tasks.Charge{}, false
	}
	str := func(name string) string {
		var s string
		if json.Unmarshal(obj[name], &s) == nil {
			return s
		}
		var n json.Number
		if json.Unmarshal(obj[name], &n) == nil {
			return n.String()
		}
		return ""
	}
	c := tasks.Charge{ChargeID: str("id"), Status: str("status"), Currency: str("currency")}
	if c.ChargeID == "" {
		c.ChargeID = str("charge_id")
	}
	_ = json.Unmarshal(obj["amount"], &c.Amount)
	return c, c.ChargeID != ""
}

// problemDetail is the detail of an application/problem+json body, else the
// start of the body.
func problemDetail(body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) == nil && (p.Detail != "" || p.Title != "") {
		if p.Detail != "" {
			return p.Detail
		}
		return p.Title
	}
	return truncate(body, 200)
}

func truncate(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
