package tasks

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
	"strings"
	"sync"
	"time"

	"github.com/onceq/onceq"
)

// DefaultLedgerTTL is how long the Ledger remembers an idempotency key.
const DefaultLedgerTTL = 24 * time.Hour

const maxLedgerBody = 64 << 10

// Ledger is the built-in payment gateway the embedded default serves: an
// http.Handler for POST /v1/charges with the IETF Idempotency-Key semantics,
// keeping its charges in memory. The zero value is ready; it must not be
// copied after first use.
type Ledger struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// TTL is how long a key's stored response is replayed. Default: 24h.
	TTL time.Duration

	mu      sync.Mutex
	entries map[string]ledgerEntry
	order   []ledgerSeen // insertion order, for lazy expiry
	total   int
	now     func() time.Time // tests
}

type ledgerEntry struct {
	fingerprint string
	status      int
	body        []byte
	created     time.Time
}

type ledgerSeen struct {
	key     string
	created time.Time
}

var _ http.Handler = (*Ledger)(nil)

// ServeHTTP implements http.Handler.
func (l *Ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/charges" {
		writeProblem(w, http.StatusNotFound, "no such endpoint")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	if l.Token != "" && !bearerOK(r.Header.Get("Authorization"), l.Token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="onceq-ledger"`)
		writeProblem(w, http.StatusUnauthorized, "missing or wrong bearer token")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key header is required")
		return
	}
	if _, err := onceq.NewKey("ledger", key); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad Idempotency-Key: "+err.Error())
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeProblem(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLedgerBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxLedgerBody))
			return
		}
		writeProblem(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	var p Payment
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
	if err := p.validate(); err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	// Same request, other spelling (key order, whitespace) is still the same request.
	canon, err := marshal(p)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	sum := sha256.Sum256(canon)
	fp := hex.EncodeToString(sum[:])

	e, replayed, err := l.charge(key, fp, p)
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
func (l *Ledger) charge(key, fp string, p Payment) (ledgerEntry, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	ttl := l.TTL
	if ttl <= 0 {
		ttl = DefaultLedgerTTL
	}
	if e, ok := l.entries[key]; ok && now.Sub(e.created) < ttl {
		if e.fingerprint != fp {
			return ledgerEntry{}, false, errors.New("Idempotency-Key was used with another request body")
		}
		return e, true, nil
	}
	var id [12]byte
	rand.Read(id[:])
	body, err := marshal(Charge{ChargeID: "ch_" + hex.EncodeToString(id[:]), Status: "succeeded",
		Amount: p.Amount, Currency: p.Currency})
	if err != nil {
		return ledgerEntry{}, false, err
	}
	e := ledgerEntry{fingerprint: fp, status: http.StatusCreated, body: body, created: now}
	l.expire(now, ttl)
	if l.entries == nil {
		l.entries = make(map[string]ledgerEntry)
	}
	l.entries[key] = e
	l.order = append(l.order, ledgerSeen{key: key, created: now})
	l.total++
	return e, false, nil
}

// expire drops entries older than ttl, oldest first, stopping at the first
// live one: amortised O(1) per insert. Callers hold l.mu.
func (l *Ledger) expire(now time.Time, ttl time.Duration) {
	n := 0
	for _, s := range l.order {
		if now.Sub(s.created) < ttl {
			break
		}
		// The key may have been charged again since; drop only this entry.
		if e, ok := l.entries[s.key]; ok && e.created.Equal(s.created) {
			delete(l.entries, s.key)
		}
		n++
	}
	l.order = l.order[n:]
}

func (l *Ledger) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// Charges is how many charges the ledger holds for key: 0 or 1.
func (l *Ledger) Charges(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[key]; ok {
		return 1
	}
	return 0
}

// Total is how many charges the ledger has made since it started.
func (l *Ledger) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

func bearerOK(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	b, _ := marshal(map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
	w.Write(b)
}
