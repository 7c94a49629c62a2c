package tasks

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
)

// maxGatewayResponse bounds what is read of a gateway response.
const maxGatewayResponse = 1 << 20

// defaultGatewayHTTP is GatewayClient.HTTP when nil: http.DefaultClient has
// no timeout, and a hung gateway must not hold a worker until the task deadline.
var defaultGatewayHTTP = &http.Client{Timeout: 30 * time.Second}

// GatewayClient calls a payment gateway's charge endpoint (the built-in
// Ledger, or any gateway speaking the same protocol).
type GatewayClient struct {
	URL   string // base URL; the charge endpoint is URL + "/v1/charges"
	Token string // bearer token; empty sends none
	// HTTP is the client to use. Default: one with a 30s timeout.
	HTTP *http.Client
}

// Charge is the gateway's answer to a charge request.
type Charge struct {
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Replayed: the gateway answered from its idempotency store
	// (Idempotent-Replayed: true); no new charge was made.
	Replayed bool `json:"-"`
}

// GatewayError is a non-2xx gateway response.
type GatewayError struct {
	StatusCode int
	Detail     string
}

func (e *GatewayError) Error() string {
	return fmt.Sprintf("tasks: gateway: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Detail)
}

// Retryable reports whether the same request may succeed later: the first
// request with the key is still in flight (409), rate limiting (429), a
// timeout (408) or a server error.
func (e *GatewayError) Retryable() bool {
	switch e.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return true
	}
	return e.StatusCode >= 500
}

// Charge asks the gateway to charge p once under idempotency key. Network
// errors and retryable statuses return plain errors, so asynq retries with
// the same key; other refusals (422: key reused with another payment, 400,
// 401) wrap asynq.SkipRetry and a *GatewayError.
func (g *GatewayClient) Charge(ctx context.Context, key string, p Payment) (Charge, error) {
	if g.URL == "" {
		return Charge{}, errors.New("tasks: gateway: no URL")
	}
	if key == "" {
		return Charge{}, fmt.Errorf("tasks: gateway: %w: empty idempotency key", ErrInvalid)
	}
	body, err := marshal(p)
	if err != nil {
		return Charge{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(g.URL, "/")+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, fmt.Errorf("tasks: gateway: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if g.Token != "" {
		req.Header.Set("Authorization", "Bearer "+g.Token)
	}
	client := g.HTTP
	if client == nil {
		client = defaultGatewayHTTP
	}
	resp, err := client.Do(req)
	if err != nil {
		return Charge{}, fmt.Errorf("tasks: gateway: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxGatewayResponse+1))
	if err != nil {
		return Charge{}, fmt.Errorf("tasks: gateway: reading response: %w", err)
	}
	if len(data) > maxGatewayResponse {
		return Charge{}, fmt.Errorf("tasks: gateway: response over %d bytes", maxGatewayResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		gerr := &GatewayError{StatusCode: resp.StatusCode, Detail: problemDetail(data)}
		if gerr.Retryable() {
			return Charge{}, gerr
		}
		return Charge{}, permanent(gerr)
	}
	var c Charge
	// Not strict: a gateway may add fields to its answer.
	if err := json.Unmarshal(data, &c); err != nil || c.ChargeID == "" {
		// The charge may exist: retry, and the same key replays it.
		return Charge{}, fmt.Errorf("tasks: gateway: %d response is not a charge: %q", resp.StatusCode, truncate(data, 200))
	}
	c.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return c, nil
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
