// Package httpauth reads the one credential onceq's HTTP servers take: a
// bearer token, by the rules of RFC 9110 §11.
package httpauth

import (
	"net/http"
	"strings"
)

// Bearer returns the token of r's "Authorization: Bearer <token>" header.
// The scheme is case-insensitive (RFC 9110 §11.1) and spaces after it are
// skipped; ok is false for any other scheme or an empty token.
func Bearer(r *http.Request) (token string, ok bool) {
	scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimLeft(tok, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}
