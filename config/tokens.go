package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// MinTokenBytes is the shortest admin or API token accepted: a guessable
// token is worse than none, because it looks like protection.
const MinTokenBytes = 16

// clientName is the principal part of a "name:token" ONCEQ_API_TOKENS entry.
var clientName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// nameLike is what a person types as a client name when they get the rule
// wrong (Alice, "shop eu", .ops): an entry starting so is refused rather
// than taken for a bare token that happens to contain ":".
var nameLike = regexp.MustCompile(`^[\p{L}\p{N} _.@+-]{1,64}$`)

// APIClient is one ONCEQ_API_TOKENS entry. Name is "" for a bare token:
// the API then derives a stable principal from the token.
type APIClient struct {
	Name  string
	Token string
	// ReadAll: GET /v1/jobs answers this client for every job, however it
	// was enqueued.
	ReadAll bool
	// Operator: as ReadAll, and DELETE /v1/jobs resets any key for this
	// client, as `producer reset` does.
	Operator bool
}

// Suffixes of a name:token entry that widen its client's scope.
const (
	readAllSuffix  = ":read-all" // APIClient.ReadAll
	operatorSuffix = ":operator" // APIClient.Operator
)

// Clients parses ONCEQ_API_TOKENS: "name:token" entries name their
// principal; an entry whose part before the first ":" is not a valid name
// is a bare token. A token that contains ":" must therefore be given a name
// (validateClients refuses one that starts like a mistyped name).
// A named entry ending in ":read-all" (audit:token:read-all) reads every
// job; one ending in ":operator" (ops:token:operator) reads every job and
// resets keys.
// A name may repeat: its client keeps its keys and jobs while its token
// rotates (alice:old,alice:new). Bare tokens are each their own client.
func (a API) Clients() []APIClient {
	cs := make([]APIClient, 0, len(a.Tokens))
	for _, e := range a.Tokens {
		if name, tok, ok := strings.Cut(e, ":"); ok && clientName.MatchString(name) {
			tok, all := strings.CutSuffix(tok, readAllSuffix)
			tok, op := strings.CutSuffix(tok, operatorSuffix)
			if !all { // both, in either order, is refused by validateClients
				tok, all = strings.CutSuffix(tok, readAllSuffix)
			}
			cs = append(cs, APIClient{Name: name, Token: tok, ReadAll: all, Operator: op})
		} else {
			cs = append(cs, APIClient{Token: e})
		}
	}
	return cs
}

func (a API) validateClients() error {
	for i, e := range a.Tokens {
		if name, _, ok := strings.Cut(e, ":"); ok && !clientName.MatchString(name) && nameLike.MatchString(name) {
			// Neither the part nor the entry is quoted: for a bare token it is the secret.
			return fmt.Errorf("config: ONCEQ_API_TOKENS entry %d: the part before the first \":\" is not a client name "+
				"(lower-case letters, digits, _ . -, starting with a letter or digit, at most 64): write name:token, "+
				"e.g. alice:<token>; a bare token that contains \":\" must be given a name too (name:<token>)", i+1)
		}
	}
	toks, scopes := map[string]bool{}, map[string]string{}
	for i, c := range a.Clients() {
		if c.ReadAll && c.Operator {
			return fmt.Errorf("config: ONCEQ_API_TOKENS: client %s: write :operator or :read-all, not both (an operator reads every job)", c.Name)
		}
		scope := scopeOf(c)
		if was, seen := scopes[c.Name]; seen && c.Name != "" && was != scope {
			return fmt.Errorf("config: ONCEQ_API_TOKENS: client %s is %s in one entry and %s in another", c.Name, was, scope)
		}
		scopes[c.Name] = scope
		what := fmt.Sprintf("ONCEQ_API_TOKENS entry %d", i+1)
		if c.Name != "" {
			what += " (" + c.Name + ")"
		}
		if err := checkToken(what, c.Token); err != nil {
			return err
		}
		if toks[c.Token] {
			return fmt.Errorf("config: %s: the token is given twice", what)
		}
		toks[c.Token] = true
	}
	return nil
}

// scopeOf names a client's scope for errors.
func scopeOf(c APIClient) string {
	switch {
	case c.Operator:
		return "operator"
	case c.ReadAll:
		return "read-all"
	}
	return "neither read-all nor operator"
}

// checkToken refuses empty, padded and short tokens, without quoting them.
func checkToken(what, tok string) error {
	if err := checkSecretValue(what, tok); err != nil {
		return err
	}
	if len(tok) < MinTokenBytes {
		return fmt.Errorf("config: %s is shorter than %d bytes: use e.g. `openssl rand -hex 32`", what, MinTokenBytes)
	}
	return nil
}

// WebhookSecrets maps a webhook source to its signing secrets. It is set as
// "source:secret" pairs, comma-separated; a source given twice has two
// secrets, both accepted, so that a sender can rotate without downtime
// (acme:old,acme:new, then drop acme:old once the sender signs with new).
type WebhookSecrets map[string][]string

// Decode implements envconfig.Decoder. The value is a secret: errors do not quote it.
func (w *WebhookSecrets) Decode(v string) error {
	m := WebhookSecrets{}
	if v != "" {
		for i, pair := range strings.Split(v, ",") {
			src, secret, ok := strings.Cut(pair, ":")
			if !ok || strings.Contains(secret, ":") {
				return fmt.Errorf("entry %d is not source:secret (a secret cannot contain , or :)", i+1)
			}
			m[src] = append(m[src], secret)
		}
	}
	*w = m
	return nil
}

func (w WebhookSecrets) validate() error {
	for _, src := range slices.Sorted(maps.Keys(w)) {
		if !webhookSource.MatchString(src) {
			return fmt.Errorf("config: ONCEQ_WEBHOOK_SECRETS: source %q must match %s", src, webhookSource)
		}
		for i, s := range w[src] {
			if err := checkSecretValue(fmt.Sprintf("ONCEQ_WEBHOOK_SECRETS secret %d of %s", i+1, src), s); err != nil {
				return err
			}
		}
	}
	return nil
}
