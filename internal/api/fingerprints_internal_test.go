package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// A retry of the same bytes under the same key is answered without
// building the job again; other bytes of the same meaning are built, and
// are the same request.
func TestReplayOfTheSameBytesSkipsTheBuild(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Producer: oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}), Store: store, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Drain(t.Context()) })
	s := h.s
	builds := 0
	post := func(body string) *httptest.ResponseRecorder {
		r := withPrincipal(httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body)), "shop")
		w := httptest.NewRecorder()
		s.submit(w, r, "payments", "payment:charge", "order-7", []byte(body), func() (dedup.Job, *response) {
			builds++
			return s.build("payment:charge", []byte(body), "order-7", "shop")
		})
		return w
	}
	body := `{"payment_id":"pmt-fp-1","account":"acct-fp","amount":100,"currency":"EUR"}`
	first, again := post(body), post(body)
	if first.Code != http.StatusAccepted || again.Body.String() != first.Body.String() || again.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("first %d %s, retry %d %s %v: want the first replayed", first.Code, first.Body, again.Code, again.Body, again.Header())
	}
	if builds != 1 {
		t.Fatalf("the job was built %d times, want once: the retry's bytes were the first's", builds)
	}
	spaced := post(strings.ReplaceAll(body, ",", ", "))
	if builds != 2 || spaced.Body.String() != first.Body.String() || spaced.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("the same payment spaced otherwise: %d builds, %d %s; want it built, and replayed", builds, spaced.Code, spaced.Body)
	}
}
