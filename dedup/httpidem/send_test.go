package httpidem_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// heldStore holds every Complete until release is closed (or its ctx ends).
type heldStore struct {
	storage.Store
	release  chan struct{}
	returned atomic.Bool // a Complete has returned
}

func (s *heldStore) Complete(ctx context.Context, h storage.Hold, result []byte, ttl time.Duration) error {
	defer s.returned.Store(true)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Complete(ctx, h, result, ttl)
}

// A fresh answer reaches the client before it is stored (one store round
// trip off its latency), the connection serves the client's next request
// meanwhile (its retry, replayed from memory), and Drain waits for the
// store.
func TestResponseGoesOutBeforeItIsStored(t *testing.T) {
	t.Parallel()
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{DoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldStore{Store: store, release: make(chan struct{})}
	g, err := httpidem.New(held, httpidem.Options{Lease: time.Minute, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := httptest.NewServer(g.Middleware(httpidem.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "charged "+string(rune('0'+runs.Add(1))))
	})))
	t.Cleanup(srv.Close)

	first := post(t, srv.URL+"/pay", "p-1", "x")
	if held.returned.Load() {
		t.Fatal("the answer came after its Complete returned: it waited for the store")
	}
	again := post(t, srv.URL+"/pay", "p-1", "x")
	if first.status != http.StatusOK || again.body != first.body || again.header.Get(httpidem.ReplayedHeader) != "true" || held.returned.Load() {
		t.Fatalf("first %+v, retry while storing %+v: want the first replayed from memory", first, again)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := g.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain while the store is held: %v, want the deadline", err)
	}
	close(held.release)
	if err := g.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Status(t.Context(), httpidem.ReplayKey("/POST /pay", "p-1"))
	if err != nil || rec.State != dedup.StatusDone {
		t.Fatalf("after Drain the record is %+v %v, want done", rec, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// A retry reaching another replica while the first answer is being stored
// waits for it (InFlightWait) and is replayed it, instead of a 409.
func TestAnotherReplicaWaitsForTheStoredReplay(t *testing.T) {
	t.Parallel()
	store, err := dedup.NewRedisStore(redistest.Client(t), storage.Options{DoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldStore{Store: store, release: make(chan struct{})}
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "charged "+string(rune('0'+runs.Add(1))))
	})
	replica := func(s storage.Store, wait time.Duration) string {
		g, err := httpidem.New(s, httpidem.Options{Lease: time.Minute, InFlightWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Drain(context.Background()) })
		srv := httptest.NewServer(g.Middleware(httpidem.MiddlewareOptions{})(h))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	a, b, noWait := replica(held, 0), replica(store, 0), replica(store, -1)

	first := post(t, a+"/pay", "p-2", "x")
	if r := post(t, noWait+"/pay", "p-2", "x"); r.status != http.StatusConflict {
		t.Fatalf("without InFlightWait the retry got %d, want 409 while the first is stored", r.status)
	}
	got := make(chan reply, 1)
	go func() { got <- post(t, b+"/pay", "p-2", "x") }()
	time.Sleep(20 * time.Millisecond) // b is waiting; had it not waited, it has answered 409
	close(held.release)
	if r := <-got; r.status != http.StatusOK || r.body != first.body || r.header.Get(httpidem.ReplayedHeader) != "true" {
		t.Fatalf("the other replica answered %d %q, want %q replayed", r.status, r.body, first.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}
