package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// budget caps, process-wide, the bytes of request bodies read before
// anything authenticated them. Without it every open connection may make
// the process hold a whole body: 600 unsigned 1 MiB webhooks held it at
// 870 MB. A reservation is taken before a byte is read and returned once the
// signature is checked, so what stays after (an accepted event's payload
// until its enqueue ends) is authenticated.
type budget struct {
	sem   *semaphore.Weighted
	pools [64]sync.Pool // of *[]byte, by log2 of the buffer's size; see class
	// wait is how long a request waits for room before it is refused:
	// short, so a burst of genuine senders is smoothed, never queued for
	// long behind slow ones.
	wait time.Duration
	// bodyTimeout bounds the read of a body that holds a reservation, so
	// a slow sender frees it in time (the server's ReadTimeout is longer).
	bodyTimeout time.Duration
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
// and refused returns its reservation once the signature is checked.
type heldBody struct {
	b    *budget
	buf  []byte
	held int64
}

// authenticated returns the reservation; the bytes stay the caller's.
func (h *heldBody) authenticated() {
	h.b.sem.Release(h.held)
	h.held, h.buf = 0, nil
}

// refused returns the reservation and recycles the buffer: the caller must
// not touch the body again.
func (h *heldBody) refused() {
	buf := h.buf
	h.authenticated()
	h.b.put(buf)
}

// readUnsigned reads r's body as readBody does, but within the budget: the
// buffer is sized from Content-Length (one read into it, no copy), or
// without it grows by doubling from chunk up to MaxBodyBytes, each growth
// reserved before it is allocated. Nothing of the body is read until its
// reservation is had; without room within the budget's wait the answer is
// a 503 with Retry-After. On success the caller must call authenticated or
// refused on held once the signature is checked.
func (s *server) readUnsigned(w http.ResponseWriter, r *http.Request) (body []byte, held *heldBody, resp *response) {
	b := s.budget
	h := &heldBody{b: b}
	reserve := func(n int64) bool {
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		defer cancel()
		if b.sem.Acquire(ctx, n) != nil {
			return false
		}
		h.held += n
		return true
	}
	fail := func(p response) ([]byte, *heldBody, *response) {
		h.refused()
		return nil, nil, &p
	}
	limit := s.opts.MaxBodyBytes
	tooLarge := problem(http.StatusRequestEntityTooLarge, probTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
	switch {
	case r.ContentLength > limit:
		return fail(tooLarge)
	case r.ContentLength == 0:
		return []byte{}, h, nil
	}
	want := r.ContentLength
	if want < 0 {
		want = min(chunk, limit)
	}
	size := class(want, limit)
	if !reserve(size) {
		return fail(s.overBudget())
	}
	h.buf = b.get(size)
	rc := http.NewResponseController(w)
	// Not every ResponseWriter reaches a connection (a recorder does not):
	// there the server's ReadTimeout alone bounds the read.
	_ = rc.SetReadDeadline(time.Now().Add(b.bodyTimeout))
	// Once the body is in, nothing more of this request is read; a deadline
	// left behind would fire in net/http's background read and cancel the
	// request's context in the middle of its enqueue.
	done := func() ([]byte, *heldBody, *response) {
		_ = rc.SetReadDeadline(time.Time{})
		return h.buf, h, nil
	}
	for {
		end := cap(h.buf)
		if r.ContentLength >= 0 {
			end = int(r.ContentLength)
		}
		n, err := io.ReadFull(r.Body, h.buf[len(h.buf):end])
		h.buf = h.buf[:len(h.buf)+n]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if r.ContentLength >= 0 {
				return fail(problem(http.StatusBadRequest, probBadRequest, "the body ended before its Content-Length"))
			}
			return done()
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fail(problem(http.StatusRequestTimeout, probBodyTimeout,
					fmt.Sprintf("the body did not arrive within %s", b.bodyTimeout)))
			}
			return fail(problem(http.StatusBadRequest, probBadRequest, "reading the body failed"))
		}
		if r.ContentLength >= 0 {
			return done() // net/http ends a body at its Content-Length
		}
		if int64(cap(h.buf)) == limit {
			var probe [1]byte
			if n, _ := io.ReadFull(r.Body, probe[:]); n > 0 {
				return fail(tooLarge)
			}
			return done()
		}
		// Only the growth is reserved, so that a budget of MaxBodyBytes
		// admits a body of that size; the old buffer, copied out at once,
		// goes back to its pool.
		old := h.buf
		grown := class(int64(cap(old))*2, limit)
		if !reserve(grown - int64(cap(old))) {
			return fail(s.overBudget())
		}
		h.buf = append(b.get(grown), old...)
		b.put(old)
	}
}

// overBudget is the 503 for a body the budget has no room for.
func (s *server) overBudget() response {
	return problemOf(Problem{Type: ProblemType + probBodyBudget.slug, Title: probBodyBudget.title, Status: http.StatusServiceUnavailable,
		Detail: "too many unauthenticated bodies are being read; retry later", RetryAfter: seconds(s.budget.wait)})
}
