package config

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"
)

// webhookSource is what a {source} path segment may be.
var webhookSource = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// API is the configuration of the HTTP ingest API (`producer serve`). Its
// /healthz, /readyz and /metrics are served on Addr too.
type API struct {
	Redis
	Log
	Dedup
	Postgres
	HTTPHosts

	// Addr is the listen address; beyond loopback it requires Tokens.
	// Default: 127.0.0.1:8081.
	Addr string `envconfig:"ONCEQ_API_ADDR" default:"127.0.0.1:8081" desc:"ingest API listen address; beyond loopback it requires ONCEQ_API_TOKENS"`

	// Tokens are the accepted bearer tokens, each at least 16 bytes, as
	// name:token entries (the name is the client that owns its keys and
	// jobs) or bare tokens (the API derives a stable name); see Clients.
	// Default: none.
	Tokens []string `envconfig:"ONCEQ_API_TOKENS" secret:"true" desc:"secret: comma-separated bearer tokens accepted by the API, as name:token, name:token:read-all (a client reading every job), name:token:operator (reading every job and resetting keys) or bare (16 bytes or more)"`

	// WebhookSecrets maps a webhook source to its HMAC-SHA256 signing
	// secrets, as source:secret pairs; a source given twice accepts both
	// (rotation). A secret cannot contain , or :.
	// Default: none.
	WebhookSecrets WebhookSecrets `envconfig:"ONCEQ_WEBHOOK_SECRETS" secret:"true" desc:"secret: source:secret pairs for webhook HMAC signatures; a source may repeat while its secret rotates"`

	// WebhookSchemes names, per source, how its sender signs, as
	// source:scheme pairs: onceq (Onceq-Signature), stripe
	// (Stripe-Signature), github (X-Hub-Signature-256) or standard (Standard
	// Webhooks; its secrets are the whsec_<base64> strings the sender shows).
	// Default: onceq for every source.
	WebhookSchemes map[string]string `envconfig:"ONCEQ_WEBHOOK_SCHEMES" desc:"source:scheme pairs naming how each webhook source signs: onceq (default), stripe, github or standard"`

	// WebhookIDFields names, per onceq-scheme source, the top-level field of the signed
	// body that holds the sender's event id, as source:field pairs.
	// Default: "id" for every source.
	WebhookIDFields map[string]string `envconfig:"ONCEQ_WEBHOOK_ID_FIELDS" desc:"source:field pairs naming the signed body's event id field (default id)"`

	// WebhookTolerance is how far a signed webhook timestamp may be from
	// now, against replays of captured requests.
	// Default: 5m.
	WebhookTolerance time.Duration `envconfig:"ONCEQ_WEBHOOK_TOLERANCE" default:"5m" desc:"accepted clock skew of webhook signature timestamps"`

	// GitHubReplayWindow is how long a github source refuses a body it
	// accepted once, under any event type (GitHub signs neither the type
	// nor a time): a redelivery its done record still knows stays a
	// duplicate; any other copy is 429. At least 1s.
	// Default: 168h (7 days).
	GitHubReplayWindow time.Duration `envconfig:"ONCEQ_GITHUB_REPLAY_WINDOW" default:"168h" desc:"how long a github source refuses a body it accepted once, under any event type (429 with Retry-After)"`

	// MaxBodyBytes caps request bodies.
	// Default: 1048576 (1 MiB).
	MaxBodyBytes int64 `envconfig:"ONCEQ_MAX_BODY_BYTES" default:"1048576" desc:"largest request body, in bytes"`

	// WebhookBodyBudget caps the bytes of webhook bodies being read before
	// their signature is checked, all connections together, so that
	// unauthenticated senders cannot make the process hold a body each.
	// Beyond it a webhook waits briefly, then is answered 503 with
	// Retry-After. At least MaxBodyBytes.
	// Default: 33554432 (32 MiB).
	WebhookBodyBudget int64 `envconfig:"ONCEQ_WEBHOOK_BODY_BUDGET" default:"33554432" desc:"bytes of webhook bodies read before their signature is checked, all connections together; beyond it 503 with Retry-After (at least ONCEQ_MAX_BODY_BYTES)"`

	// WebhookPeerBudget caps the part of the body budget one peer address
	// holds at once; beyond it 503 at once. Behind a reverse proxy every
	// peer is the proxy: set it to the whole budget there.
	// Default: 0, the budget / 8 but at least ONCEQ_MAX_BODY_BYTES.
	WebhookPeerBudget int64 `envconfig:"ONCEQ_WEBHOOK_PEER_BUDGET" default:"0" desc:"bytes of the webhook body budget one peer address may hold at once (0: the budget / 8, at least ONCEQ_MAX_BODY_BYTES); behind a proxy set it to the budget"`

	// WebhookFirstByteTimeout bounds the wait from a webhook's request head
	// to its body's first byte. The wait holds no budget.
	// Default: 5s.
	WebhookFirstByteTimeout time.Duration `envconfig:"ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT" default:"5s" desc:"a webhook body must start this long after its request head, else 408"`

	// WebhookBodyTimeout bounds the read of a webhook body from its first
	// byte, so a slow sender frees its budget in time.
	// Default: 10s.
	WebhookBodyTimeout time.Duration `envconfig:"ONCEQ_WEBHOOK_BODY_TIMEOUT" default:"10s" desc:"a webhook body must arrive whole this long after its first byte, else 408"`

	// ReplayTTL is how long a completed request's response is kept for
	// replay to a retried request with the same Idempotency-Key.
	// Default: 24h.
	ReplayTTL time.Duration `envconfig:"ONCEQ_REPLAY_TTL" default:"24h" desc:"how long responses are kept for Idempotency-Key replays"`
}

// Loopback reports whether Addr binds loopback only.
func (a API) Loopback() bool { return loopback(a.Addr) }

func (a API) validate() error {
	for _, v := range []func() error{a.Redis.validate, a.Log.validate, a.Dedup.validate, a.Postgres.validate, a.HTTPHosts.validate} {
		if err := v(); err != nil {
			return err
		}
	}
	if err := checkListenAddr("ONCEQ_API_ADDR", a.Addr); err != nil {
		return err
	}
	if err := a.validateClients(); err != nil {
		return err
	}
	if !a.Loopback() && len(a.Tokens) == 0 {
		return fmt.Errorf("config: ONCEQ_API_ADDR %q is reachable beyond loopback: set ONCEQ_API_TOKENS", a.Addr)
	}
	if err := a.WebhookSecrets.validate(); err != nil {
		return err
	}
	if err := a.validateSchemes(); err != nil {
		return err
	}
	for _, src := range slices.Sorted(maps.Keys(a.WebhookIDFields)) {
		if _, ok := a.WebhookSecrets[src]; !ok {
			return fmt.Errorf("config: ONCEQ_WEBHOOK_ID_FIELDS names source %q, which has no ONCEQ_WEBHOOK_SECRETS entry", src)
		}
		if sc := a.WebhookScheme(src); sc != SchemeOnceq {
			return fmt.Errorf("config: ONCEQ_WEBHOOK_ID_FIELDS names source %q, whose scheme %s takes the event id from what the sender signs", src, sc)
		}
	}
	if a.WebhookTolerance <= 0 {
		return fmt.Errorf("config: ONCEQ_WEBHOOK_TOLERANCE must be positive, got %s", a.WebhookTolerance)
	}
	if a.GitHubReplayWindow < time.Second {
		return fmt.Errorf("config: ONCEQ_GITHUB_REPLAY_WINDOW must be at least 1s, got %s", a.GitHubReplayWindow)
	}
	if a.MaxBodyBytes < 1 {
		return fmt.Errorf("config: ONCEQ_MAX_BODY_BYTES must be at least 1, got %d", a.MaxBodyBytes)
	}
	if a.WebhookPeerBudget != 0 && a.WebhookPeerBudget < a.MaxBodyBytes {
		return fmt.Errorf("config: ONCEQ_WEBHOOK_PEER_BUDGET (%d) must be 0 or at least ONCEQ_MAX_BODY_BYTES (%d): a body of the largest size would never be read", a.WebhookPeerBudget, a.MaxBodyBytes)
	}
	if a.WebhookFirstByteTimeout < time.Millisecond || a.WebhookBodyTimeout < time.Millisecond {
		return errors.New("config: ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT and ONCEQ_WEBHOOK_BODY_TIMEOUT must be positive")
	}
	if a.WebhookBodyBudget < a.MaxBodyBytes {
		return fmt.Errorf("config: ONCEQ_WEBHOOK_BODY_BUDGET (%d) must be at least ONCEQ_MAX_BODY_BYTES (%d): a body of the largest size would never be read", a.WebhookBodyBudget, a.MaxBodyBytes)
	}
	if a.ReplayTTL < time.Second {
		return errors.New("config: ONCEQ_REPLAY_TTL must be at least 1s")
	}
	return nil
}
