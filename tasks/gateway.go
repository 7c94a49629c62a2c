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

	"github.com/onceq/onceq"
)

// maxGatewayResponse bounds what is read of a gateway response.
const maxGatewayResponse = 1 << 20

// defaultGatewayHTTP is GatewayClient.HTTP when nil: http.DefaultClient has
// no timeout, and a hung gateway must not hold a worker until the task deadline.
var defaultGatewayHTTP = &http.Client{Timeout: 30 * time.Second}

// Gateway is the payment port: it charges p once per idempotency key, so a
// redelivered task gets the original charge back instead of a second one.
// Errors wrapping asynq.SkipRetry are refusals that no retry can change;
// any other error is retried by asynq under the same key.
type Gateway interface {
	Charge(ctx context.Context, key string, p Payment) (Charge, error)
}

var _ Gateway = (*GatewayClient)(nil)

// GatewayClient calls a generic HTTP payment gateway (the built-in Ledger,
// or any gateway speaking the protocol in the README: POST /v1/charges with
// an Idempotency-Key, a 2xx answer naming the charge by "id" or "charge_id").
type GatewayClient struct {
	URL   string // base URL; the charge endpoint is URL + "/v1/charges"
	Token string // bearer token; empty sends none
	// HTTP is the client to use. Default: one with a 30s timeout.
	HTTP *http.Client
}

// Charge is a gateway's answer to a charge request, and the result onceq
// stores for the payment.
type Charge struct {
	// ChargeID is the gateway's id of the charge: "ch_..." from a generic
	// gateway, the PaymentIntent "pi_..." from Stripe.
	ChargeID string `json:"id"`
	// Status is the gateway's word for the charge ("succeeded", or a Stripe
	// PaymentIntent status such as "processing" or "requires_action").
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
		return Charge{}, fmt.Errorf("tasks: gateway: %w: empty idempotency key", onceq.ErrInvalid)
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
	c, ok := decodeCharge(data)
	if !ok {
		// The charge may exist: retry, and the same key replays it.
		return Charge{}, fmt.Errorf("tasks: gateway: %d response is not a charge (no \"id\" or \"charge_id\"): %q", resp.StatusCode, truncate(data, 200))
	}
	c.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return c, nil
}

// decodeCharge reads a 2xx gateway body: a JSON object naming the charge by
// "id" (as Stripe and most gateways do) or "charge_id", a string or a number.
// Lenient beyond that: the money has moved, so an extra field or an amount
// of another type must not turn the answer into a retry.
func decodeCharge(data []byte) (Charge, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return Charge{}, false
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
	c := Charge{ChargeID: str("id"), Status: str("status"), Currency: str("currency")}
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
