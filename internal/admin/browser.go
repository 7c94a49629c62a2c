package admin

import "net/http"

// frameDeny forbids framing the dashboard on any site: a page that frames
// it could trick a logged-in operator into clicking its buttons.
func frameDeny(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses cross-site requests that change something. A browser
// sends cached Basic credentials with a form posted from any site, so
// authentication alone does not stop a page on evil.example from pausing a
// queue (CSRF). net/http's CrossOriginProtection checks Sec-Fetch-Site and
// Origin; clients that send neither (curl, scripts) are not browsers and
// pass. Safe methods always pass.
func sameOrigin(next http.Handler) http.Handler {
	return http.NewCrossOriginProtection().Handler(next)
}
