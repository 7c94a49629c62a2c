package config

import (
	"slices"
	"strings"
	"testing"
)

// The full list is the contract with deploy/k8s; changing it is deliberate.
func TestKnownVariables(t *testing.T) {
	want := []string{
		"ONCEQ_ADMIN_ADDR", "ONCEQ_ADMIN_TOKEN", "ONCEQ_API_ADDR", "ONCEQ_API_TOKENS",
		"ONCEQ_CLAMD_ADDR", "ONCEQ_CONCURRENCY", "ONCEQ_DASHBOARD_READONLY", "ONCEQ_DONE_TTL",
		"ONCEQ_EMBEDDED", "ONCEQ_ENV", "ONCEQ_FAILED_TTL", "ONCEQ_GATEWAY_TOKEN", "ONCEQ_GATEWAY_URL", "ONCEQ_GITHUB_REPLAY_WINDOW", "ONCEQ_HTTP_HOSTS",
		"ONCEQ_KEEP_COMPLETED", "ONCEQ_LEASE", "ONCEQ_LIVENESS", "ONCEQ_LOG_LEVEL", "ONCEQ_MAXMEMORY_CHECK", "ONCEQ_MAX_BODY_BYTES",
		"ONCEQ_MAX_RESULT_BYTES", "ONCEQ_ON_REPEAT", "ONCEQ_OUTBOX", "ONCEQ_OUTBOX_DIR", "ONCEQ_PAYMENT_ID_SCOPE", "ONCEQ_PAYMENT_ID_WINDOW", "ONCEQ_PAYMENT_RATE_WINDOW", "ONCEQ_POSTGRES_LEDGER",
		"ONCEQ_POSTGRES_MAX_CONNS", "ONCEQ_POSTGRES_RETENTION", "ONCEQ_POSTGRES_URL", "ONCEQ_QUEUES", "ONCEQ_QUEUE_SHARDS", "ONCEQ_REDIS_CLUSTER_NODES",
		"ONCEQ_REDIS_DIAL_TIMEOUT", "ONCEQ_REDIS_MIN_REPLICAS", "ONCEQ_REDIS_PASSWORD", "ONCEQ_REDIS_READ_TIMEOUT", "ONCEQ_REDIS_URL", "ONCEQ_REDIS_WAIT_TIMEOUT",
		"ONCEQ_REDIS_WRITE_TIMEOUT", "ONCEQ_REPLAY_TTL", "ONCEQ_RESULT_TTL", "ONCEQ_SCAN_MAX_BYTES", "ONCEQ_SCAN_ROOT", "ONCEQ_SCAN_SHARED_ROOT",
		"ONCEQ_SCAN_SIGNATURES", "ONCEQ_SCAN_WINDOW", "ONCEQ_SHUTDOWN_TIMEOUT", "ONCEQ_SMTP_ADDR", "ONCEQ_SMTP_FROM",
		"ONCEQ_SMTP_PASSWORD", "ONCEQ_SMTP_USER", "ONCEQ_STRICT_PRIORITY", "ONCEQ_STRIPE_KEY", "ONCEQ_STRIPE_URL",
		"ONCEQ_TASK_LOG", "ONCEQ_UNIQUE_WINDOW", "ONCEQ_WEBHOOK_BODY_BUDGET", "ONCEQ_WEBHOOK_BODY_TIMEOUT", "ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT", "ONCEQ_WEBHOOK_ID_FIELDS", "ONCEQ_WEBHOOK_PEER_BUDGET", "ONCEQ_WEBHOOK_SCHEMES", "ONCEQ_WEBHOOK_SECRETS", "ONCEQ_WEBHOOK_TOLERANCE",
	}
	if got := known(); !slices.Equal(got, want) {
		t.Errorf("known() =\n%q\nwant\n%q", got, want)
	}
}

func TestRequiredVariables(t *testing.T) {
	if got := required(); len(got) != 0 {
		t.Errorf("required() = %q, want none: every setting has a default", got)
	}
}

// The tag walker behind secrets and Redacted must see exactly the names
// envconfig reads, and every name must carry the one prefix.
func TestWalkerMatchesEnvconfig(t *testing.T) {
	var walked []string
	for _, s := range specs() {
		for _, v := range variables(s) {
			walked = append(walked, v.key)
			if !strings.HasPrefix(v.key, Prefix+"_") || strings.ToUpper(v.key) != v.key {
				t.Errorf("%s: name must be upper case and start with %s_", v.key, Prefix)
			}
			if v.field.Tag.Get("desc") == "" {
				t.Errorf("%s: no desc tag, --help would say nothing", v.key)
			}
			if v.secret() != strings.HasPrefix(v.field.Tag.Get("desc"), "secret:") {
				t.Errorf("%s: secret tag and desc disagree", v.key)
			}
			if v.secret() && v.field.Tag.Get("default") != "" {
				t.Errorf("%s: a secret must not have a default", v.key)
			}
		}
	}
	slices.Sort(walked)
	if walked = slices.Compact(walked); !slices.Equal(walked, known()) {
		t.Errorf("walker sees %q\nenvconfig sees %q", walked, known())
	}
}
