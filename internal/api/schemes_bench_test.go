package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// BenchmarkWebhookSchemes is one accepted delivery per scheme, verify and
// enqueue, over a real loopback socket against a real redis-server: each
// iteration a new event, signed as its sender signs it. Compare the
// schemes' ns/op with onceq's own in the same run.
//
//	go test -run '^$' -bench WebhookSchemes -benchtime 2000x ./api/
func BenchmarkWebhookSchemes(b *testing.B) {
	e := newEnv(b, func(o *api.Options) {
		o.WebhookSecrets = map[string][]string{"acme": {secret}, "stripe": {"whsec_stripe_bench"},
			"github": {ghSecret}, "svix": {stdSecret}}
		o.WebhookSchemes = map[string]api.Scheme{"stripe": api.SchemeStripe, "github": api.SchemeGitHub, "svix": api.SchemeStandard}
	})
	std, err := standardwebhooks.NewWebhook(stdSecret)
	if err != nil {
		b.Fatal(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	sign := map[string]func(i int) (string, map[string]string){
		"onceq": func(i int) (string, map[string]string) {
			body := eventBody(fmt.Sprintf("evt_%s_%d", run, i), 1)
			return body, map[string]string{api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(body))}
		},
		"stripe": func(i int) (string, map[string]string) {
			body := fmt.Sprintf(`{"id":"evt_%s_%d","object":"event","api_version":"2019-02-19","created":1686089970,`+
				`"data":{"object":{"id":"cus_1","object":"customer"}},"livemode":false,"pending_webhooks":1,"type":"customer.created"}`, run, i)
			return body, stripeHeader("whsec_stripe_bench", body, e.clock())
		},
		"github": func(i int) (string, map[string]string) {
			body := fmt.Sprintf(`{"action":"opened","issue":{"id":%d,"title":"bench %s"},"sender":{"login":"octocat"}}`, i, run)
			return body, ghHeader("issues", fmt.Sprintf("d-%s-%d", run, i), ghSign(body))
		},
		"svix": func(i int) (string, map[string]string) {
			id, body := fmt.Sprintf("msg_%s_%d", run, i), fmt.Sprintf(`{"type":"invoice.paid","n":%d}`, i)
			sig, err := std.Sign(id, e.clock(), []byte(body))
			if err != nil {
				b.Fatal(err)
			}
			return body, stdHeader(id, strconv.FormatInt(e.clock().Unix(), 10), sig)
		},
	}
	for _, src := range []string{"onceq", "stripe", "github", "svix"} {
		path := src
		if src == "onceq" {
			path = "acme"
		}
		n := 0 // across the runs b.Run makes: every event new
		b.Run(src, func(b *testing.B) {
			for range b.N {
				n++
				i := n
				body, h := sign[src](i)
				if r := e.deliver(b, path, body, h); r.Status != http.StatusAccepted {
					b.Fatalf("%s delivery %d: %d %s", src, i, r.Status, r.Body)
				}
			}
		})
	}
}
