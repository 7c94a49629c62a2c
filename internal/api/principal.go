package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/onceq/onceq/internal/httpauth"
)

// Client is one API caller: the principal that owns its idempotency keys
// and jobs, and its bearer token.
type Client struct {
	Name  string
	Token string
	// ReadAll: GET /v1/jobs answers this client for any job, enqueued by
	// any client, the CLI, a batch file or library code.
	ReadAll bool
	// Operator: as ReadAll, and DELETE /v1/jobs resets any key for this
	// client (the scope of `producer reset`).
	Operator bool
}

// principalName is what a Client.Name may be: it becomes part of dedup ids.
var principalName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// Anonymous is the principal of every request when no token is configured.
const Anonymous = "anonymous"

// Prefixes of the API's own principals: a client named with one would own
// their keys and jobs (a "webhook-acme" client reading acme's webhooks).
const (
	derivedPrefix = "token-"
	webhookPrefix = "webhook-"
)

func reserved(name string) bool {
	return name == Anonymous || strings.HasPrefix(name, derivedPrefix) || strings.HasPrefix(name, webhookPrefix)
}

// DerivedPrincipal is the principal of a token configured without a name:
// stable across restarts and token order, and no use to anyone who reads
// it in a key or a log.
func DerivedPrincipal(token string) string {
	sum := sha256.Sum256([]byte("onceq principal\x00" + token))
	return derivedPrefix + hex.EncodeToString(sum[:6])
}

// clients merges Options.Tokens (bare, named by DerivedPrincipal) and
// Options.Clients, refusing empty tokens, bad names and a token given twice.
func (o Options) clients() ([]Client, error) {
	var cs []Client
	for i, t := range o.Tokens {
		if t == "" {
			return nil, fmt.Errorf("api: token %d is empty", i+1)
		}
		cs = append(cs, Client{Name: DerivedPrincipal(t), Token: t})
	}
	for _, c := range o.Clients {
		if c.Token == "" {
			return nil, fmt.Errorf("api: client %q has an empty token", c.Name)
		}
		if !principalName.MatchString(c.Name) {
			return nil, fmt.Errorf("api: client name %q must match %s", c.Name, principalName)
		}
		if reserved(c.Name) {
			return nil, fmt.Errorf("api: client name %q is reserved: %q, token-* and webhook-* are the API's own principals", c.Name, Anonymous)
		}
		cs = append(cs, c)
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.Token] {
			return nil, fmt.Errorf("api: client %q: a token is given twice", c.Name)
		}
		seen[c.Token] = true
	}
	return cs, nil
}

type credential struct {
	name     string
	readAll  bool
	operator bool
	sum      [sha256.Size]byte
}

type principalKey struct{}

type caller struct {
	name     string
	readAll  bool
	operator bool
	// shared: the server has one caller at most (no tokens, or one), so
	// the caller shares the CLI's, batch files' and library's scope: its
	// job keys and rate rules are theirs, it reads every job and, as the
	// CLI does, resets keys.
	shared bool
}

// principal is the caller that bearer authenticated, or the webhook source.
func principal(ctx context.Context) string {
	if c, ok := ctx.Value(principalKey{}).(caller); ok {
		return c.name
	}
	return Anonymous
}

// source is the way in a key's history names for the caller's enqueues:
// "webhook:<source>" for a webhook, else "http:<client>".
func source(ctx context.Context) string {
	p := principal(ctx)
	if src, ok := strings.CutPrefix(p, webhookPrefix); ok {
		return "webhook:" + src
	}
	return "http:" + p
}

// readsAll reports whether the caller may read every job (Client.ReadAll,
// an operator, or the one caller of a shared scope).
func readsAll(ctx context.Context) bool {
	c, _ := ctx.Value(principalKey{}).(caller)
	return c.readAll || c.operates()
}

// operates reports whether the caller may reset keys (Client.Operator, or
// the one caller of a shared scope).
func (c caller) operates() bool { return c.operator || c.shared }

// keyScope is the scope of the caller's job keys and rate rules for
// Catalog.Build: its name, or "" (the CLI's) when it shares the scope.
func keyScope(ctx context.Context) string {
	if c, _ := ctx.Value(principalKey{}).(caller); c.shared {
		return ""
	}
	return principal(ctx)
}

func withPrincipal(r *http.Request, p string) *http.Request {
	return withCaller(r, caller{name: p})
}

func withCaller(r *http.Request, c caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, c))
}

// authenticate finds the client of an "Authorization: Bearer <token>"
// header; the scheme is case-insensitive (RFC 9110 §11.1). Both sides are
// hashed first and every credential is compared, so neither a token's
// length nor its position leaks through timing.
func (s *server) authenticate(r *http.Request) (caller, bool) {
	tok, ok := httpauth.Bearer(r)
	if !ok {
		return caller{}, false
	}
	sum := sha256.Sum256([]byte(tok))
	var who caller
	for _, c := range s.creds {
		if subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1 {
			who = caller{name: c.name, readAll: c.readAll, operator: c.operator}
		}
	}
	return who, who.name != ""
}

// bearer wants one of the clients' tokens and puts its principal in the
// request's context. Without clients, every caller is Anonymous.
func (s *server) bearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.creds) == 0 {
			next.ServeHTTP(w, withCaller(r, caller{name: Anonymous, shared: true}))
			return
		}
		who, ok := s.authenticate(r)
		if !ok {
			unauthorized(w, "send Authorization: Bearer <token>")
			return
		}
		// With one client there is no other to keep apart from: rules
		// such as a payment's "same amount to the same account within
		// 60 s" hold across it, the CLI and batch files.
		who.shared = len(s.creds) == 1
		next.ServeHTTP(w, withCaller(r, who))
	})
}

// unauthorized is every 401 the API writes: RFC 9110 wants a challenge on each.
func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="onceq"`)
	problem(http.StatusUnauthorized, probUnauthorized, detail).write(w)
}

// Authorizer returns a wrapper that lets through requests bearing any of
// o's tokens (for /metrics on the API's port); with none configured it lets
// everything through. Failures are 401 problems with a challenge.
func Authorizer(o Options) (func(http.Handler) http.Handler, error) {
	cs, err := o.clients()
	if err != nil {
		return nil, err
	}
	s := &server{creds: credentials(cs)}
	return s.bearer, nil
}

func credentials(cs []Client) []credential {
	creds := make([]credential, 0, len(cs))
	for _, c := range cs {
		creds = append(creds, credential{name: c.Name, readAll: c.ReadAll, operator: c.Operator, sum: sha256.Sum256([]byte(c.Token))})
	}
	return creds
}
