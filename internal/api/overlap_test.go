package api_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
)

// heldComplete holds every Complete of its store until release is closed.
type heldComplete struct {
	storage.Store
	release  chan struct{}
	returned atomic.Bool
}

func (s *heldComplete) Complete(ctx context.Context, h storage.Hold, result []byte, ttl time.Duration) error {
	defer s.returned.Store(true)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Complete(ctx, h, result, ttl)
}

// heldOwner holds every owner record write (a SET of *:api-owner) until
// release is closed.
type heldOwner struct {
	release chan struct{}
	wrote   atomic.Bool
}

func (h *heldOwner) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldOwner) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *heldOwner) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if k, _ := args[min(1, len(args)-1)].(string); cmd.Name() == "set" && strings.HasSuffix(k, ":api-owner") {
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
			defer h.wrote.Store(true)
		}
		return next(ctx, cmd)
	}
}

// A first payment's 202 goes out before its replay record and its owner
// record are written: two round trips before the answer, not three. This
// process answers from what it has written meanwhile: the retry is
// replayed from memory, and GET /v1/jobs and the client's own repeat wait
// for the owner record instead of calling the job no one's.
func TestFirstAnswerGoesOutBeforeItsWrites(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	owner := &heldOwner{release: make(chan struct{})}
	side := redis.NewClient(rdb.Options()) // the API's own client, the same database
	side.AddHook(owner)
	t.Cleanup(func() { side.Close() })
	var replays *heldComplete
	e := newEnvOn(t, rdb, func(o *api.Options) {
		replays = &heldComplete{Store: o.Store, release: make(chan struct{})}
		o.Store, o.Redis = replays, side
	})
	body := paymentBody("pmt-overlap", "acct-overlap", 100)

	first := e.post(paymentPath, body, "overlap-1")
	a := accepted(t, first, http.StatusAccepted)
	if replays.returned.Load() || owner.wrote.Load() {
		t.Fatal("the 202 waited for its replay record or its owner record")
	}
	again := e.post(paymentPath, body, "overlap-1")
	if string(again.Body) != string(first.Body) || again.Header.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("retry while the writes are held: %d %s, want the 202 replayed", again.Status, again.Body)
	}
	got := make(chan reply, 2)
	for _, r := range []req{{method: http.MethodGet, path: "/v1/jobs/" + url.PathEscape(a.Key)}, {path: paymentPath, body: body}} {
		go func() {
			rep, err := e.try(r)
			if err != nil {
				rep.Body = []byte(err.Error())
			}
			got <- rep
		}()
	}
	time.Sleep(20 * time.Millisecond) // both are in; had they not waited, they have answered
	close(owner.release)
	for range 2 {
		r := <-got
		// Not the 404, nor the foreign answer ("another client's job").
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), a.Key) || strings.Contains(string(r.Body), "another client") {
			t.Fatalf("while the owner record was being written: %d %s, want job %s as the caller's", r.Status, r.Body, a.Key)
		}
	}
	close(replays.release)
	if err := e.h.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec, err := e.replays.Status(t.Context(), api.ReplayKey(api.DerivedPrincipal(token), "payments", "overlap-1"))
	if err != nil || rec.State != dedup.StatusDone {
		t.Fatalf("after Drain the replay record is %+v %v, want done", rec, err)
	}
}
