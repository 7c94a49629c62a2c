// Package httpauth holds the rules onceq's HTTP servers share about who
// may call them: the one credential they take, a bearer token (RFC 9110
// §11), and which names are loopback.
package httpauth

import (
	"net"
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

// LoopbackHost reports whether host (no port; brackets allowed) always
// names this machine: localhost, *.localhost (RFC 6761) or a loopback IP.
func LoopbackHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
