package api

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// Listener wraps ln so that the errors net/http writes on the connection
// itself, before any handler runs (400 for a malformed request, 431 for
// headers over the limit, 501 for an unknown transfer coding), are problem
// documents like every other error. net/http offers no hook for them; they
// are recognised by the fixed headers it writes with them.
func Listener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

type problemConn struct{ net.Conn }

// netHTTPError is what follows the status line of net/http's own errors.
const netHTTPError = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c problemConn) Write(p []byte) (int, error) {
	status, detail, ok := parseNetHTTPError(p)
	if !ok {
		return c.Conn.Write(p)
	}
	resp := problem(status, kindOf(status), detail)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(resp.Body), resp.Body)
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// parseNetHTTPError reads "HTTP/1.1 <code> <text>[: <detail>]" + netHTTPError.
func parseNetHTTPError(p []byte) (int, string, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 {
		return 0, "", false
	}
	line, _, ok := bytes.Cut(rest, []byte(netHTTPError))
	if !ok || bytes.Contains(line, []byte("\r\n")) {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 {
		return 0, "", false
	}
	_, detail, _ := bytes.Cut(line[3:], []byte(": "))
	return status, string(detail), true
}

func itoa(n int) string { return strconv.Itoa(n) }
