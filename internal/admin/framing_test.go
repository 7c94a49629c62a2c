package admin_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/admin"
)

// raw sends req on a fresh connection and returns every response read
// until the server closes it (or nothing more comes).
func raw(t *testing.T, addr, req string) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	var out []*http.Response
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp)
	}
}

// A request framed both by Content-Length and Transfer-Encoding is
// refused and the connection closed, so a request smuggled behind it is
// never answered. Requests framed one way only still share a connection.
func TestFramingSmuggling(t *testing.T) {
	t.Parallel()
	var paths []string
	s, err := admin.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		paths = append(paths, r.URL.Path)
		w.Write([]byte("ok"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })

	smuggled := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	resps := raw(t, s.Addr(), smuggled)
	if len(resps) != 1 || resps[0].StatusCode != http.StatusBadRequest || !resps[0].Close {
		t.Fatalf("CL+TE: %d responses %v; want one 400 that closes the connection", len(resps), statuses(resps))
	}
	// Lower case and the other order are the same request.
	resps = raw(t, s.Addr(), "POST /b HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n")
	if len(resps) != 1 || resps[0].StatusCode != http.StatusBadRequest {
		t.Fatalf("te+cl in lower case: %v; want 400", statuses(resps))
	}
	// Content-Length framing: three requests on one connection, bodies included.
	resps = raw(t, s.Addr(), "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n\r\n\r\n"+
		"GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /3 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	if len(resps) != 3 || statuses(resps) != "200 200 200" {
		t.Fatalf("pipelined Content-Length requests: %v; want three 200s", statuses(resps))
	}
	// A chunked request is served, and the connection closed after it.
	resps = raw(t, s.Addr(), "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	if len(resps) != 1 || resps[0].StatusCode != http.StatusOK || !resps[0].Close {
		t.Fatalf("chunked: %v; want one 200 that closes the connection", statuses(resps))
	}
	if got := strings.Join(paths, " "); got != "/1 /2 /3 /c" {
		t.Fatalf("the handler saw %q; want /1 /2 /3 /c (nothing smuggled)", got)
	}
}

func statuses(rs []*http.Response) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Status[:3])
	}
	return strings.Join(s, " ")
}

// A tokenless server behind Local answers loopback names and the extra
// ones only: a page whose DNS name was pointed at 127.0.0.1 is refused.
func TestLocalHosts(t *testing.T) {
	t.Parallel()
	s, err := admin.Listen("127.0.0.1:0", admin.Local(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}), []string{"box.lan"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	_, port, _ := net.SplitHostPort(s.Addr())
	for host, want := range map[string]int{
		"127.0.0.1:" + port: 200, "localhost:" + port: 200, "LOCALHOST": 200, "[::1]:" + port: 200,
		"app.localhost": 200, "127.9.9.9": 200, "box.lan:" + port: 200, "BOX.LAN": 200,
		"rebind.example:" + port: 421, "rebind.example": 421, "localhost.example": 421, "10.0.0.1": 421, "box.lan.example": 421,
	} {
		resps := raw(t, s.Addr(), "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		if len(resps) != 1 || resps[0].StatusCode != want {
			t.Errorf("Host %q: %v; want %d", host, statuses(resps), want)
		}
	}
}
