package peertest

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// StripeMockKey is a secret key stripe-mock accepts (it checks the shape only).
const StripeMockKey = "sk_test_onceq"

var (
	stripeOnce sync.Once
	stripeProc *process
	stripeURL  string
	stripeErr  error
)

// StopShared stops the shared stripe-mock, if one was started. Without it
// the process dies with the test binary; call it from TestMain where a leak
// check runs after the tests.
func StopShared() {
	if stripeProc != nil {
		stripeProc.stop()
	}
}

// StripeMock returns the base URL of a stripe-mock on a loopback port,
// shared by the tests of one package: it is stateless, and loading its
// OpenAPI spec takes seconds. It answers every valid request with Stripe's
// fixtures (a PaymentIntent's status is always the fixture's), reflects the
// Idempotency-Key, deduplicates nothing and never declines a card: put a
// StripePeer in front to count requests and play declines.
func StripeMock(t testing.TB) string {
	t.Helper()
	path, err := binary("stripe-mock")
	if err != nil {
		unavailable(t, err.Error(), "go install github.com/stripe/stripe-mock@"+StripeMockVersion)
	}
	stripeOnce.Do(func() {
		// Both listeners on loopback with free ports: by default stripe-mock
		// also opens HTTPS on all interfaces at a fixed port.
		const prefix = "Listening for HTTP at address: "
		p, addr, err := startProcess(path, []string{"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0"},
			func(line string) (string, bool) {
				a, ok := strings.CutPrefix(line, prefix)
				return a, ok
			}, 2*time.Minute)
		stripeProc, stripeURL, stripeErr = p, "http://"+addr, err
	})
	if stripeErr != nil {
		t.Fatalf("peertest: stripe-mock: %v", stripeErr)
	}
	return stripeURL
}
