package admin

import (
	"net"
	"net/http"
	"strings"

	"github.com/onceq/onceq/internal/httpauth"
)

// Local lets through only requests whose Host names this machine's
// loopback (localhost, *.localhost, 127.0.0.0/8, ::1) or one of extra. A
// tokenless server on loopback must check it: a web page can point its own
// DNS name at 127.0.0.1 (DNS rebinding) and the browser then sends the
// page's requests, Host and all, to the server.
func Local(h http.Handler, extra []string) http.Handler {
	allowed := map[string]bool{}
	for _, e := range extra {
		allowed[strings.ToLower(e)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		if !httpauth.LoopbackHost(host) && !allowed[host] {
			w.Header().Set("Connection", "close")
			refuse(w, http.StatusMisdirectedRequest, "this server answers only to loopback host names: it has no token, so it must not answer a page that pointed its DNS name here (set ONCEQ_HTTP_HOSTS to add names)")
			return
		}
		h.ServeHTTP(w, r)
	})
}
