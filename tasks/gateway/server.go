package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/httpauth"
	"github.com/onceq/onceq/tasks"
)

// DefaultTTL is how long a Server remembers an idempotency key.
const DefaultTTL = 24 * time.Hour

const maxBody = 64 << 10

// Server is the built-in payment gateway the embedded default serves: an
// http.Handler for POST /v1/charges with the IETF Idempotency-Key semantics,
// keeping its charges in memory. The zero value is ready; it must not be
// copied after first use.
type Server struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// TTL is how long a key's stored response is replayed. Default: 24h.
	TTL time.Duration

	mu      sync.Mutex
	entries map[string]entry
	order   []seen // insertion order, for lazy expiry
	total   int
	now     func() time.Time // tests
}

type entry struct {
	fingerprint string
	status      int
	body        []byte
	created     time.Time
}

type seen struct {
	key     string
	created time.Time
}

var _ http.Handler = (*Server)(nil)

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/charges" {
		writeProblem(w, http.StatusNotFound, "no such endpoint")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	if s.Token != "" && !bearerOK(r, s.Token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="onceq-gateway"`)
		writeProblem(w, http.StatusUnauthorized, "missing or wrong bearer token")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key header is required")
		return
	}
	if _, err := dedup.NewKey("gateway", key); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad Idempotency-Key: "+err.Error())
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeProblem(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxBody))
			return
		}
		writeProblem(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	var p tasks.Payment
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeProblem(w, http.StatusBadRequest, "bad JSON: trailing data")
		return
	}
	if err := p.Validate(); err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	// Same request, other spelling (key order, whitespace) is still the same request.
	canon, err := json.Marshal(p)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	sum := sha256.Sum256(canon)
	fp := hex.EncodeToString(sum[:])

	e, replayed, err := s.charge(key, fp, p)
	if err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(e.status)
	w.Write(e.body)
}

// charge returns the stored response for key, or makes the charge and
// stores its response. All under the lock, so two concurrent requests with
// one key make one charge; the response is written after unlocking.
func (s *Server) charge(key, fp string, p tasks.Payment) (entry, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	ttl := s.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if e, ok := s.entries[key]; ok && now.Sub(e.created) < ttl {
		if e.fingerprint != fp {
			return entry{}, false, errors.New("Idempotency-Key was used with another request body")
		}
		return e, true, nil
	}
	var id [12]byte
	rand.Read(id[:])
	body, err := json.Marshal(tasks.Charge{ChargeID: "ch_" + hex.EncodeToString(id[:]), Status: "succeeded",
		Amount: p.Amount, Currency: p.Currency})
	if err != nil {
		return entry{}, false, err
	}
	e := entry{fingerprint: fp, status: http.StatusCreated, body: body, created: now}
	s.expire(now, ttl)
	if s.entries == nil {
		s.entries = make(map[string]entry)
	}
	s.entries[key] = e
	s.order = append(s.order, seen{key: key, created: now})
	s.total++
	return e, false, nil
}

// expire drops entries older than ttl, oldest first, stopping at the first
// live one: amortised O(1) per insert. Callers hold s.mu.
func (s *Server) expire(now time.Time, ttl time.Duration) {
	n := 0
	for _, o := range s.order {
		if now.Sub(o.created) < ttl {
			break
		}
		// The key may have been charged again since; drop only this entry.
		if e, ok := s.entries[o.key]; ok && e.created.Equal(o.created) {
			delete(s.entries, o.key)
		}
		n++
	}
	s.order = s.order[n:]
}

func (s *Server) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Charges is how many charges the server holds for key: 0 or 1.
func (s *Server) Charges(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[key]; ok {
		return 1
	}
	return 0
}

// Total is how many charges the server has made since it started.
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func bearerOK(r *http.Request, token string) bool {
	got, ok := httpauth.Bearer(r)
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
	w.Write(b)
}
