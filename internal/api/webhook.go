package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/strictjson"
	"github.com/onceq/onceq/tasks"
)

// SignatureHeader carries a webhook's signature: "t=<unix>,v1=<hex>".
const SignatureHeader = "Onceq-Signature"

func mac(secret string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

var errNoMatch = errors.New("signature does not match")

// verify checks a SignatureHeader value. Unknown schemes are ignored (a
// sender may add v2 before we know it); at least one v1 must match. The
// timestamp is checked after the MAC, so only a holder of the secret learns
// that a request was merely stale.
func verify(header, secret string, body []byte, now time.Time, tolerance time.Duration) error {
	if header == "" {
		return errors.New("missing " + SignatureHeader + " header")
	}
	var (
		ts   int64
		sigs [][]byte
	)
	malformed := errors.New(SignatureHeader + " is not t=<unix seconds>,v1=<hex HMAC-SHA256>")
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return malformed
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || ts != 0 {
				return malformed
			}
			ts = n
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return malformed
			}
			sigs = append(sigs, b)
		}
	}
	if ts == 0 || len(sigs) == 0 {
		return malformed
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		ok = hmac.Equal(s, want) || ok // compare all: no early exit
	}
	if !ok {
		return errNoMatch
	}
	return checkTimestamp(ts, now, tolerance)
}

// WebhookEvent is what onceq reads of an onceq-scheme body with the
// default id field; any other members are kept, not refused. Attempt is the
// sender's delivery count: it may change between redeliveries. A source
// configured with another id field sends that field instead of (or beside)
// id.
type WebhookEvent struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
}

// reservedEventField are the event fields onceq reads besides the id.
var reservedEventField = map[string]bool{"type": true, "data": true, "attempt": true}

// verifyAny accepts a signature by any of secrets (a source rotating its
// secret has two). Each is tried, so the time taken does not say which one
// matched.
func verifyAny(header string, secrets []string, body []byte, now time.Time, tolerance time.Duration) error {
	var first error
	ok := false
	for _, secret := range secrets {
		err := verify(header, secret, body, now, tolerance)
		if err == nil {
			ok = true
		} else if first == nil || first.Error() == errNoMatch.Error() {
			first = err
		}
	}
	if ok {
		return nil
	}
	return first
}

// unsignedDetail answers every webhook whose signature does not verify, and
// every one to an unknown source: the same bytes, so an outsider learns
// neither which sources exist nor how each signs. The operator's log says
// why.
const unsignedDetail = "the request is not signed by a secret of this source"

// unsignedChallenge is the WWW-Authenticate of that answer: it names no
// sender's scheme.
const unsignedChallenge = `Signature realm="onceq webhooks"`

// unsigned answers 401 bad-signature, with detail when the signature was
// verified but is stale, else unsignedDetail.
func unsigned(w http.ResponseWriter, detail string) {
	if detail == "" {
		detail = unsignedDetail
	}
	w.Header().Set("WWW-Authenticate", unsignedChallenge)
	problem(http.StatusUnauthorized, probBadSignature, detail).write(w)
}

// webhook serves POST /v1/webhooks/{source}: the source's scheme
// authenticates, the job key is the source plus the event id from what the
// sender signed, so a captured body re-sent under a new Idempotency-Key (or
// delivery id) is still a duplicate. The Idempotency-Key is optional; it
// only scopes replays of the response. An unknown source, and a signature
// that does not verify, are the one 401 (unsigned).
func (s *server) webhook(w http.ResponseWriter, r *http.Request) {
	source := r.PathValue("source")
	v, known := s.sources[source]
	// An unknown source's body is read as a known one's, and refused alike.
	body, held, ok := s.readUnsigned(w, r)
	if !ok {
		return
	}
	now := s.opts.Now()
	if !known {
		held.refused()
		s.opts.Log.Debug("webhook refused: unknown source", zap.String("source", source))
		unsigned(w, "")
		return
	}
	signedID, err := v.verify(r.Header, body, now, s.opts.WebhookTolerance)
	if err != nil {
		held.refused()
		s.opts.Log.Info("webhook refused", zap.String("source", source), zap.String("scheme", string(v.scheme)), zap.Error(err))
		var stale staleError
		if errors.As(err, &stale) {
			unsigned(w, err.Error()) // only a holder of the secret gets here
		} else {
			unsigned(w, "")
		}
		return
	}
	held.authenticated()
	r = withPrincipal(r, webhookPrefix+source)
	if resp := checkJSON(r); resp != nil {
		resp.write(w)
		return
	}
	key, resp := idempotencyKey(r)
	if resp != nil {
		resp.write(w)
		return
	}
	idField := s.opts.WebhookIDFields[source]
	if idField == "" {
		idField = "id"
	}
	// Attempt, the arrival time and the body (where senders change delivery
	// metadata) are left out of the job's fingerprint, so a retry is not a
	// mismatch.
	// No raw body: the job reads the headers and the clock too.
	s.submit(w, r, "webhooks/"+source, tasks.TypeWebhook, key, nil,
		func() (dedup.Job, *response) {
			wh, err := event(v.scheme, body, r.Header, idField, signedID)
			if err != nil {
				resp := refused(err)
				return dedup.Job{}, &resp
			}
			wh.Source, wh.ReceivedAt = source, now.UTC().Format(time.RFC3339Nano)
			payload, err := json.Marshal(wh)
			if err != nil {
				resp := invalid(err)
				return dedup.Job{}, &resp
			}
			return s.build(tasks.TypeWebhook, payload, "", "") // the sender's ids: source-scoped by the type
		})
}

// gitHubEventID is a GitHub delivery's event id: the SHA-256 of its event
// type and body. GitHub signs the body alone and its delivery id not at
// all, so the unsigned type is held to the body by the key: the same body
// under another type is another key, which the source's replay window
// (tasks.Windows.WebhookReplay) then refuses.
func gitHubEventID(typ string, body []byte) string {
	m := sha256.New()
	m.Write([]byte(typ + "\n"))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// event reads a verified webhook body, any JSON object, kept whole as the
// payload's body. The event id comes from what the sender signed: signedID
// (Standard Webhooks), the body's idField (onceq; "id" for Stripe), or for
// GitHub, whose delivery id is not signed, gitHubEventID. The
// type is the body's "type" (onceq's dialect: or its "event"), or GitHub's
// X-GitHub-Event header.
func event(sc Scheme, body []byte, h http.Header, idField, signedID string) (tasks.Webhook, error) {
	var fields map[string]json.RawMessage
	if err := strictjson.Decode(body, &fields); err != nil {
		return tasks.Webhook{}, err
	}
	wh := tasks.Webhook{Body: body}
	member := func(name string, v any) error {
		raw, ok := fields[name]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return fmt.Errorf("%w: field %q: %v", dedup.ErrMalformed, name, err)
		}
		return nil
	}
	switch sc {
	case SchemeGitHub:
		wh.Type = h.Get(GitHubEventHeader)
		wh.EventID = gitHubEventID(wh.Type, body)
		return wh, nil
	case SchemeStandard:
		wh.EventID = signedID
	case SchemeStripe:
		if err := member("id", &wh.EventID); err != nil {
			return tasks.Webhook{}, err
		}
	default:
		if raw, ok := fields[idField]; ok {
			var n json.Number
			err := json.Unmarshal(raw, &wh.EventID)
			if err != nil && json.Unmarshal(raw, &n) == nil {
				if _, ierr := n.Int64(); ierr == nil {
					wh.EventID, err = n.String(), nil
				}
			}
			if err != nil {
				return tasks.Webhook{}, fmt.Errorf("%w: field %q: %v", dedup.ErrMalformed, idField, err)
			}
		}
		if err := member("attempt", &wh.Attempt); err != nil {
			return tasks.Webhook{}, err
		}
	}
	if err := member("type", &wh.Type); err != nil {
		return tasks.Webhook{}, err
	}
	if _, ok := fields["type"]; !ok && sc == SchemeOnceq {
		// onceq's dialect names the type "type", or "event" as many
		// senders do ({"id":"evt_123","event":"user.created",...}).
		if err := member("event", &wh.Type); err != nil {
			return tasks.Webhook{}, err
		}
	}
	if wh.Type == "" && sc == SchemeOnceq {
		// onceq's own dialect requires a type; another sender's event
		// without one is routed nowhere and acknowledged.
		return tasks.Webhook{}, fmt.Errorf("%w: the event type (\"type\", or \"event\") is missing or empty", dedup.ErrInvalid)
	}
	if wh.EventID == "" {
		return tasks.Webhook{}, fmt.Errorf("%w: the event id field %q is missing or empty", dedup.ErrInvalid, idField)
	}
	return wh, nil
}
