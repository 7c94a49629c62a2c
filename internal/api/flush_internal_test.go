package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A flush inside the API's wrappers (the status counter, the problem
// rewriter) reaches the client before the handler returns: a first
// payment's answer goes out ahead of its last writes.
func TestFlushReachesTheClientThroughTheWrappers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := &server{opts: Options{Requests: noRequests{}}}
	srv := httptest.NewServer(s.base(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		<-release
	})))
	t.Cleanup(srv.Close)
	defer close(release)
	got := make(chan string, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b := make([]byte, 5)
		n, _ := io.ReadFull(resp.Body, b)
		got <- string(b[:n])
	}()
	select {
	case b := <-got:
		if b != "first" {
			t.Fatalf("read %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing reached the client while the handler ran: the flush stopped at a wrapper")
	}
}
