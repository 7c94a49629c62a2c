package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// budget caps, process-wide, the bytes of request bodies read before
// anything authenticated them. Without it every open connection may make
// the process hold a whole body: 600 unsigned 1 MiB webhooks held it at
// 870 MB. Room is taken as a body's bytes arrive, never for bytes only
// declared: a connection that sends a head declaring 1 MiB and then nothing
// holds none (40 such heads made 7 of 9 signed webhooks fail when room was
// taken from Content-Length). It is returned once the signature is checked,
// so what stays after (an accepted event's payload until its enqueue ends)
// is authenticated.
type budget struct {
	sem   *semaphore.Weighted
	pools [64]sync.Pool // of *[]byte, by log2 of the buffer's size; see class
	// wait is how long a request waits for room before it is refused:
	// short, so a burst of genuine senders is smoothed, never queued for
	// long behind slow ones.
	wait time.Duration
	// firstByte bounds the wait from the handler's start to a body's first
	// byte, which holds no room; bodyTimeout then bounds the rest of the
	// body, so a slow sender frees its room in time (the server's
	// ReadTimeout is longer).
	firstByte, bodyTimeout time.Duration

	// perPeer caps what one peer address holds at once, so that one host
	// cannot take the whole budget.
	perPeer int64
	mu      sync.Mutex
	peers   map[string]int64 // bytes held, by peer address; no entry at 0
}

// reserve takes n bytes of room for peer: refused at once when the peer
// would hold more than its share, else waiting up to b.wait for room.
func (b *budget) reserve(ctx context.Context, peer string, n int64) (ok, peerFull bool) {
	b.mu.Lock()
	if b.peers[peer]+n > b.perPeer {
		b.mu.Unlock()
		return false, true
	}
	b.peers[peer] += n
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	if b.sem.Acquire(ctx, n) != nil {
		b.release(peer, 0, n)
		return false, false
	}
	return true, false
}

// release returns n bytes of room to the budget and peerN to peer's share.
func (b *budget) release(peer string, n, peerN int64) {
	if n > 0 {
		b.sem.Release(n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers[peer] -= peerN; b.peers[peer] <= 0 {
		delete(b.peers, peer)
	}
}

// chunk is the first step by which a body of unknown length (no
// Content-Length) grows; it doubles from there, never past MaxBodyBytes.
const chunk = 64 << 10

// minBuffer is the smallest buffer class.
const minBuffer = 4 << 10

// class is the buffer size a body of n bytes gets: the power of two at or
// above n, at most limit. Buffers come in few sizes so that a refused
// body's buffer serves the next body: under a flood of unsigned bodies the
// heap holds the budget's worth of buffers, not the garbage of every body.
func class(n, limit int64) int64 {
	c := int64(minBuffer)
	for c < n {
		c *= 2
	}
	return min(c, limit)
}

func (b *budget) get(size int64) []byte {
	if p, ok := b.pools[bits.Len64(uint64(size-1))].Get().(*[]byte); ok && int64(cap(*p)) == size {
		return (*p)[:0]
	}
	return make([]byte, 0, size)
}

func (b *budget) put(buf []byte) {
	if cap(buf) > 0 {
		buf = buf[:0]
		b.pools[bits.Len64(uint64(cap(buf)-1))].Put(&buf)
	}
}

// heldBody is a body read under the budget; exactly one of authenticated
// and refused returns its room once the signature is checked.
type heldBody struct {
	b    *budget
	peer string
	buf  []byte
	held int64
}

// authenticated returns the room; the bytes stay the caller's.
func (h *heldBody) authenticated() {
	h.b.release(h.peer, h.held, h.held)
	h.held, h.buf = 0, nil
}

// refused returns the room and recycles the buffer: the caller must not
// touch the body again.
func (h *heldBody) refused() {
	buf := h.buf
	h.authenticated()
	h.b.put(buf)
}

// readUnsigned reads r's body as readBody does, but within the budget. The
// first byte is awaited holding nothing; then the buffer grows by doubling
// from chunk (or the declared length, if smaller) up to the declared
// length or MaxBodyBytes, and each step's room is taken only once every
// byte before it has arrived. A body the budget has no room for, within
// its wait, is answered 503 with Retry-After. On failure the problem is
// written and ok is false; on success the caller must call authenticated
// or refused on held once the signature is checked.
func (s *server) readUnsigned(w http.ResponseWriter, r *http.Request) (body []byte, held *heldBody, ok bool) {
	b := s.budget
	h := &heldBody{b: b, peer: peerOf(r)}
	limit := s.opts.MaxBodyBytes
	rc := http.NewResponseController(w)
	fail := func(p response) ([]byte, *heldBody, bool) {
		h.refused()
		answerUnread(w, r, rc, p, limit, b.bodyTimeout)
		return nil, nil, false
	}
	tooLarge := problem(http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
	switch {
	case r.ContentLength > limit:
		return fail(tooLarge)
	case r.ContentLength == 0:
		return []byte{}, h, true
	}
	end := limit // the most this body may have
	if r.ContentLength > 0 {
		end = r.ContentLength
	}
	// Not every ResponseWriter reaches a connection (a recorder does not):
	// there the server's ReadTimeout alone bounds the read.
	_ = rc.SetReadDeadline(time.Now().Add(b.firstByte))
	var first [1]byte
	n, err := io.ReadFull(r.Body, first[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF) && r.ContentLength < 0:
		_ = rc.SetReadDeadline(time.Time{})
		return []byte{}, h, true
	case n == 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return fail(problem(http.StatusRequestTimeout, probBodyTimeout, fmt.Sprintf("the body did not start within %s", b.firstByte)))
	case n == 0:
		return fail(problem(http.StatusBadRequest, probBadRequest, "the body ended before its Content-Length"))
	}
	_ = rc.SetReadDeadline(time.Now().Add(b.bodyTimeout))
	// Once the body is in, nothing more of this request is read; a deadline
	// left behind would fire in net/http's background read and cancel the
	// request's context in the middle of its enqueue.
	done := func() ([]byte, *heldBody, bool) {
		_ = rc.SetReadDeadline(time.Time{})
		return h.buf, h, true
	}
	for {
		// The next step: only the growth is reserved, so that a budget of
		// MaxBodyBytes admits a body of that size; the old buffer, copied
		// out at once, goes back to its pool.
		size := class(min(end, max(2*int64(cap(h.buf)), chunk)), limit)
		if ok, peerFull := b.reserve(r.Context(), h.peer, size-int64(cap(h.buf))); !ok {
			return fail(s.overBudget(peerFull))
		}
		h.held += size - int64(cap(h.buf))
		old := h.buf
		h.buf = append(b.get(size), old...)
		b.put(old)
		if len(h.buf) == 0 {
			h.buf = append(h.buf, first[0])
		}
		n, err := io.ReadFull(r.Body, h.buf[len(h.buf):min(end, size)])
		h.buf = h.buf[:len(h.buf)+n]
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if r.ContentLength > 0 {
				return fail(problem(http.StatusBadRequest, probBadRequest, "the body ended before its Content-Length"))
			}
			return done()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fail(problem(http.StatusRequestTimeout, probBodyTimeout,
				fmt.Sprintf("the body did not arrive within %s of its first byte", b.bodyTimeout)))
		case err != nil:
			return fail(problem(http.StatusBadRequest, probBadRequest, "reading the body failed"))
		case int64(len(h.buf)) == r.ContentLength:
			return done() // net/http ends a body at its Content-Length
		case r.ContentLength < 0 && int64(len(h.buf)) == limit:
			var probe [1]byte
			if n, _ := io.ReadFull(r.Body, probe[:]); n > 0 {
				return fail(tooLarge)
			}
			return done()
		}
	}
}

// answerUnread writes resp for a request whose body was not read to its
// end, then reads and drops the rest (up to limit, within timeout), so the
// sender reads its answer: a connection closed with unread bytes is reset,
// and a sender that is still writing sees the reset, not the 503.
func answerUnread(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, resp response, limit int64, timeout time.Duration) {
	_ = rc.EnableFullDuplex()
	w.Header().Set("Connection", "close")
	resp.write(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	io.Copy(io.Discard, io.LimitReader(r.Body, limit+1))
}

// peerOf is the request's peer address, without its port. Behind a
// reverse proxy every request is the proxy's.
func peerOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// overBudget is the 503 for a body the budget, or its peer's share of it,
// has no room for.
func (s *server) overBudget(peerFull bool) response {
	detail := "too many unauthenticated bodies are being read; retry later"
	if peerFull {
		detail = "too many unauthenticated bodies are being read from this address; retry later"
	}
	return problemOf(Problem{Type: ProblemType + probBodyBudget.slug, Title: probBodyBudget.title, Status: http.StatusServiceUnavailable,
		Detail: detail, RetryAfter: seconds(s.budget.wait)})
}
