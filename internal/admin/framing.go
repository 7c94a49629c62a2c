package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// net/http honours Transfer-Encoding over Content-Length when a request
// carries both, drops Content-Length and keeps the connection open. A proxy
// in front that framed the request by Content-Length then disagrees with us
// about where the next request starts: a smuggled request gets answered.
// RFC 9112 §6.1 lets a server refuse such a request and tells it to close
// the connection. The handler cannot see the dropped header, so framedConn
// reads the header section of each request as it passes on its way to
// net/http and notes, in order, whether it carried both.

// framedConn notes, for each request read from it, whether its header
// section held both Content-Length and Transfer-Encoding.
type framedConn struct {
	net.Conn
	mu      sync.Mutex
	head    []byte // the header section read so far
	body    int64  // body bytes still to skip
	lost    bool   // framing unknown from here on: a chunked body, or too long a header
	verdict []bool // per request, oldest first: both headers present
}

// maxHead bounds the header section kept; net/http refuses longer ones.
const maxHead = 64<<10 + 4096

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.feed(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *framedConn) feed(b []byte) {
	for len(b) > 0 && !c.lost {
		if c.body > 0 {
			skip := min(c.body, int64(len(b)))
			c.body -= skip
			b = b[skip:]
			continue
		}
		if len(c.head) == 0 { // blank lines before a request line are skipped
			b = bytes.TrimLeft(b, "\r\n")
			if len(b) == 0 {
				return
			}
		}
		from := max(0, len(c.head)-3)
		c.head = append(c.head, b...)
		end := headEnd(c.head[from:])
		if end < 0 {
			if len(c.head) > maxHead {
				c.lost = true
			}
			return
		}
		end += from
		rest := append([]byte(nil), c.head[end:]...)
		c.judge(c.head[:end])
		c.head, b = c.head[:0], rest
	}
}

// headEnd is the index just past the blank line that ends a header
// section, or -1.
func headEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// judge records one request's header section and how its body is framed.
func (c *framedConn) judge(head []byte) {
	var length []byte
	cl, te := false, false
	lines := bytes.Split(head, []byte("\n"))
	for _, line := range lines[1:] { // past the request line
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl, length = true, bytes.TrimSpace(value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		}
	}
	c.verdict = append(c.verdict, cl && te)
	switch {
	case te:
		// Chunked framing is not followed here; the handler closes the
		// connection after this request instead.
		c.lost = true
	case cl:
		n, err := strconv.ParseInt(string(length), 10, 64)
		if err != nil || n < 0 {
			c.lost = true // net/http refuses it and closes
		}
		c.body = n
	}
}

// next is the verdict for the request being served: true when it carried
// both headers; ok is false when none was noted.
func (c *framedConn) next() (both, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verdict) == 0 {
		return false, false
	}
	both = c.verdict[0]
	c.verdict = c.verdict[1:]
	return both, true
}

type framedListener struct{ net.Listener }

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c}, nil
}

type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// framing refuses a request that carried both Content-Length and
// Transfer-Encoding with a 400 and closes the connection; after any
// chunked request the connection is closed too, since framedConn stops
// following its framing.
func framing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc, _ := r.Context().Value(connKey{}).(*framedConn)
		if fc != nil {
			if both, ok := fc.next(); both || !ok {
				w.Header().Set("Connection", "close")
				if both {
					refuse(w, http.StatusBadRequest, "a request must not carry both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)")
					return
				}
			}
		}
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// refuse writes an RFC 9457 problem, as the API writes its own.
func refuse(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(b)
}
