package onceq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq"
)

// A job claimed, completed, then delivered again: the second delivery is a
// duplicate and gets the stored result instead of running.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store, _ := onceq.NewRedisStore(rdb, onceq.StoreOptions{})
	ctx := context.Background()

	payload := []byte(`{"to":"ada@example.com","subject":"Welcome","attempt":1}`)
	key, fp, _ := onceq.Derive("email:send", payload, "", []string{"attempt"})

	first, _ := store.Claim(ctx, key, fp, time.Minute, "")
	fmt.Println("first delivery:", first.Outcome)
	_ = store.Complete(ctx, first.Hold, []byte(`{"message_id":"<m1@onceq>"}`), 0)

	// A retry by the client: key order and the attempt counter differ.
	again := []byte(`{"attempt":2,"subject":"Welcome","to":"ada@example.com"}`)
	key2, fp2, _ := onceq.Derive("email:send", again, "", []string{"attempt"})
	second, _ := store.Claim(ctx, key2, fp2, time.Minute, "")
	fmt.Println("second delivery:", second.Outcome, string(second.Result))
	// Output:
	// first delivery: acquired
	// second delivery: duplicate {"message_id":"<m1@onceq>"}
}
