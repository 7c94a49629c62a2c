package httpidem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/httpidem"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
)

// Mount the middleware on a route of your own: a client's retry with the
// same Idempotency-Key gets the first response back instead of a second
// charge.
func ExampleGuard_Middleware() {
	rdb := redistest.Shared() // your Redis: redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	// The store's DoneTTL is how long a response is replayed.
	store, _ := dedup.NewRedisStore(rdb, storage.Options{DoneTTL: 24 * time.Hour})
	guard, _ := httpidem.New(store, httpidem.Options{})

	charges := 0
	mux := http.NewServeMux()
	mux.Handle("POST /charges", guard.Middleware(httpidem.MiddlewareOptions{Required: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			charges++
			fmt.Fprintf(w, "charge %d\n", charges)
		})))
	// Responses go out before they are stored: once the server is shut
	// down, Drain waits for those writes.
	defer guard.Drain(context.Background())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, body := range []string{`{"amount":500}`, `{"amount":500}`, `{"amount":900}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", `"order-1001"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get(httpidem.ReplayedHeader), strings.SplitN(string(b), ",", 2)[0])
		if resp.StatusCode != http.StatusOK {
			fmt.Println()
		}
	}
	fmt.Println("charges:", charges)
	// Output:
	// 200 replayed="" charge 1
	// 200 replayed="true" charge 1
	// 422 replayed="" {"type":"https://github.com/onceq/onceq/blob/main/docs/problems.md#idempotency-key-reused"
	// charges: 1
}
