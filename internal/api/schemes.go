package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v84/webhook"
)

// Scheme is how a webhook source signs its deliveries.
type Scheme string

// The schemes a source may have.
const (
	// SchemeOnceq is onceq's own: SignatureHeader, "t=<unix>,v1=<hex>".
	SchemeOnceq Scheme = "onceq"
	// SchemeStripe is Stripe's Stripe-Signature, verified by stripe-go.
	SchemeStripe Scheme = "stripe"
	// SchemeGitHub is GitHub's X-Hub-Signature-256, an HMAC of the body
	// alone: no timestamp, and the delivery id is not signed.
	SchemeGitHub Scheme = "github"
	// SchemeStandard is Standard Webhooks (webhook-id, webhook-timestamp,
	// webhook-signature), verified by the spec's Go library. Its secrets
	// are the whsec_<base64> strings the sender shows.
	SchemeStandard Scheme = "standard"
)

// DefaultGitHubReplayWindow is how long a GitHub source refuses a body it
// accepted once under another event type, or once its job is forgotten:
// GitHub signs no time, so only this window bounds a captured body's reuse.
const DefaultGitHubReplayWindow = 7 * 24 * time.Hour

// Signature headers of the other senders.
const (
	StripeSignatureHeader = "Stripe-Signature"
	GitHubSignatureHeader = "X-Hub-Signature-256"
	GitHubEventHeader     = "X-GitHub-Event"
)

// sourceVerifier checks one source's deliveries. verify returns the event
// id when the scheme signs one outside the body ("" otherwise).
type sourceVerifier struct {
	scheme  Scheme
	secrets []string
	std     []*standardwebhooks.Webhook // SchemeStandard: one per secret
}

func newSourceVerifier(sc Scheme, secrets []string) (sourceVerifier, error) {
	v := sourceVerifier{scheme: sc, secrets: secrets}
	switch sc {
	case SchemeOnceq, SchemeStripe, SchemeGitHub:
	case SchemeStandard:
		for i, s := range secrets {
			if !strings.HasPrefix(s, "whsec_") {
				return v, fmt.Errorf("secret %d is not the whsec_<base64> string the sender shows", i+1)
			}
			wh, err := standardwebhooks.NewWebhook(s)
			if err != nil {
				return v, fmt.Errorf("secret %d is not the whsec_<base64> string the sender shows", i+1)
			}
			v.std = append(v.std, wh)
		}
	default:
		return v, fmt.Errorf("unknown scheme %q", sc)
	}
	return v, nil
}

// verify authenticates a delivery. Every secret is tried, so the time taken
// does not say which one matched. Timestamps are checked after the MAC
// against Now and the one tolerance, whatever the library's own default.
func (v sourceVerifier) verify(h http.Header, body []byte, now time.Time, tolerance time.Duration) (signedID string, err error) {
	switch v.scheme {
	case SchemeStripe:
		return "", v.verifyStripe(h.Get(StripeSignatureHeader), body, now, tolerance)
	case SchemeGitHub:
		return "", v.verifyGitHub(h.Get(GitHubSignatureHeader), body)
	case SchemeStandard:
		return v.verifyStandard(h, body, now, tolerance)
	}
	return "", verifyAny(h.Get(SignatureHeader), v.secrets, body, now, tolerance)
}

func (v sourceVerifier) verifyStripe(header string, body []byte, now time.Time, tolerance time.Duration) error {
	if header == "" {
		return errors.New("missing " + StripeSignatureHeader + " header")
	}
	ok := false
	for _, s := range v.secrets {
		// Signature only: ConstructEvent would also refuse events of
		// another API version than stripe-go's, which are the sender's
		// business, not the queue's.
		ok = webhook.ValidatePayloadIgnoringTolerance(body, header, s) == nil || ok
	}
	if !ok {
		return errNoMatch
	}
	// The library accepted the header, so its t= is there.
	for part := range strings.SplitSeq(header, ",") {
		if t, ok := strings.CutPrefix(part, "t="); ok {
			ts, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return errNoMatch
			}
			return checkTimestamp(ts, now, tolerance)
		}
	}
	return errNoMatch
}

// verifyGitHub checks "sha256=<hex HMAC-SHA256(secret, body)>". GitHub has
// no maintained Go verifier of its own; this is its documented recipe.
func (v sourceVerifier) verifyGitHub(header string, body []byte) error {
	if header == "" {
		return errors.New("missing " + GitHubSignatureHeader + " header")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	sig, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(sig) != sha256.Size {
		return errors.New(GitHubSignatureHeader + " is not sha256=<hex HMAC-SHA256>")
	}
	match := false
	for _, s := range v.secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write(body)
		match = hmac.Equal(sig, m.Sum(nil)) || match
	}
	if !match {
		return errNoMatch
	}
	return nil
}

func (v sourceVerifier) verifyStandard(h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id, ts := h.Get(standardwebhooks.HeaderWebhookID), h.Get(standardwebhooks.HeaderWebhookTimestamp)
	if id == "" || ts == "" || h.Get(standardwebhooks.HeaderWebhookSignature) == "" {
		return "", errors.New("missing webhook-id, webhook-timestamp or webhook-signature header")
	}
	ok := false
	for _, wh := range v.std {
		ok = wh.VerifyIgnoringTimestamp(body, h) == nil || ok
	}
	if !ok {
		return "", errNoMatch
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", errNoMatch
	}
	if err := checkTimestamp(n, now, tolerance); err != nil {
		return "", err
	}
	return id, nil
}

// staleError is a signature that matched at a time outside the tolerance:
// the one refusal whose reason the sender is told, as only a holder of the
// secret can produce it.
type staleError struct{ tolerance time.Duration }

func (e staleError) Error() string {
	return "signature timestamp is outside the tolerance of " + e.tolerance.String() + ": check the sender's clock"
}

// checkTimestamp refuses a signed time further than tolerance from now.
func checkTimestamp(ts int64, now time.Time, tolerance time.Duration) error {
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return staleError{tolerance}
	}
	return nil
}
