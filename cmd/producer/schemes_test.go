package main

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/api"
)

// config names the schemes ONCEQ_WEBHOOK_SCHEMES accepts without
// importing api; every name it accepts must be one api serves.
func TestWebhookSchemeNamesAgree(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	store, err := dedup.NewRedisStore(rdb, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(config.WebhookSchemeNames(), "nosuch") {
		secret := "shared-secret-0123456789"
		if name == config.SchemeStandard {
			secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		_, err := api.New(api.Options{Producer: oncetest.NewProducer(t, rdb, store, dedup.ProducerOptions{}), Store: store, Redis: rdb,
			Tokens: []string{"token-0123456789abcdef"}, WebhookSecrets: map[string][]string{"src": {secret}},
			WebhookSchemes: map[string]api.Scheme{"src": api.Scheme(name)}})
		if wantErr := name == "nosuch"; (err != nil) != wantErr {
			t.Errorf("scheme %q: api.New error %v, want an error: %v", name, err, wantErr)
		}
	}
}
