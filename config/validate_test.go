package config

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       string // "" means accepted
	}{
		{"ONCEQ_ENV", "staging", "ONCEQ_ENV"},
		{"ONCEQ_ENV", "Production", "ONCEQ_ENV"},
		{"ONCEQ_LOG_LEVEL", "trace", "ONCEQ_LOG_LEVEL"},
		{"ONCEQ_LOG_LEVEL", "warn", ""},
		{"ONCEQ_LEASE", "500ms", "ONCEQ_LEASE"},
		{"ONCEQ_LEASE", "1s", ""},
		{"ONCEQ_DONE_TTL", "0s", "ONCEQ_DONE_TTL"},
		{"ONCEQ_FAILED_TTL", "-1h", "ONCEQ_FAILED_TTL"},
		{"ONCEQ_UNIQUE_WINDOW", "0s", "ONCEQ_UNIQUE_WINDOW"},
		// Under the done record the producer would say "enqueued" for a job
		// the worker then skips as a duplicate.
		{"ONCEQ_UNIQUE_WINDOW", "20s", "shorter than ONCEQ_DONE_TTL"},
		{"ONCEQ_PAYMENT_ID_WINDOW", "1h", "shorter than ONCEQ_DONE_TTL"},
		{"ONCEQ_PAYMENT_RATE_WINDOW", "0s", "ONCEQ_PAYMENT_RATE_WINDOW"},
		{"ONCEQ_SCAN_WINDOW", "10s", ""},
		{"ONCEQ_MAX_RESULT_BYTES", "0", "ONCEQ_MAX_RESULT_BYTES"},
		{"ONCEQ_QUEUE_SHARDS", "0", "ONCEQ_QUEUE_SHARDS must be 1 to 256, got 0"},
		{"ONCEQ_QUEUE_SHARDS", "257", "ONCEQ_QUEUE_SHARDS must be 1 to 256, got 257"},
		{"ONCEQ_QUEUE_SHARDS", "three", "ONCEQ_QUEUE_SHARDS"},
		{"ONCEQ_QUEUE_SHARDS", "256", ""},
		{"ONCEQ_QUEUE_SHARDS", "1", ""},
		{"ONCEQ_PAYMENT_ID_SCOPE", "tenant", `ONCEQ_PAYMENT_ID_SCOPE must be global or client, got "tenant"`},
		{"ONCEQ_PAYMENT_ID_SCOPE", "client", ""},
		{"ONCEQ_REDIS_DIAL_TIMEOUT", "0s", "ONCEQ_REDIS_DIAL_TIMEOUT"},
		{"ONCEQ_REDIS_READ_TIMEOUT", "-1s", "ONCEQ_REDIS_READ_TIMEOUT"},
		{"ONCEQ_REDIS_WRITE_TIMEOUT", "0s", "ONCEQ_REDIS_WRITE_TIMEOUT"},
		{"ONCEQ_REDIS_MIN_REPLICAS", "-1", "ONCEQ_REDIS_MIN_REPLICAS"},
		{"ONCEQ_REDIS_URL", "http://h:6379", "scheme"},
		{"ONCEQ_REDIS_URL", "unix:///tmp/redis.sock", "scheme"},
		{"ONCEQ_REDIS_URL", "redis://h:1/zero", "database"},
		{"ONCEQ_REDIS_URL", "redis://h:1?bogus=1", "bogus"},
		{"ONCEQ_REDIS_URL", "redis://h:1:2", "host:port"},
		{"ONCEQ_REDIS_URL", "redis://[::1]:6379/0", ""},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1:26379", "master name"},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1:26379/", "master name"},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1:x/m", "bad port"},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1,,h2/m", "empty sentinel host"},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1/m?db=x", "database"},
		{"ONCEQ_REDIS_URL", "redis-sentinel://h1/m?master=m", "unknown sentinel URL parameter"},
		{"ONCEQ_REDIS_CLUSTER_NODES", "c1", "ONCEQ_REDIS_CLUSTER_NODES"},
		{"ONCEQ_REDIS_CLUSTER_NODES", "c1:7000,", "ONCEQ_REDIS_CLUSTER_NODES"},
		{"ONCEQ_ADMIN_ADDR", "8080", "ONCEQ_ADMIN_ADDR"},
		{"ONCEQ_ADMIN_ADDR", "127.0.0.1:http", "numeric port"},
		{"ONCEQ_HTTP_HOSTS", "box.lan:8080", "without scheme or port"},
		{"ONCEQ_HTTP_HOSTS", "http://box.lan", "without scheme or port"},
		{"ONCEQ_HTTP_HOSTS", "box.lan,onceq.test", ""},
		{"ONCEQ_SMTP_ADDR", "smtp.example", "ONCEQ_SMTP_ADDR"},
		{"ONCEQ_SMTP_FROM", "not an address", "ONCEQ_SMTP_FROM"},
		{"ONCEQ_OUTBOX_DIR", "", "ONCEQ_OUTBOX_DIR"},
		{"ONCEQ_SCAN_ROOT", "", "ONCEQ_SCAN_ROOT"},
		{"ONCEQ_SCAN_MAX_BYTES", "0", "ONCEQ_SCAN_MAX_BYTES"},
		{"ONCEQ_CLAMD_ADDR", "clamd", "ONCEQ_CLAMD_ADDR"},
		{"ONCEQ_GATEWAY_URL", "ftp://pay.example", "ONCEQ_GATEWAY_URL"},
		{"ONCEQ_GATEWAY_URL", "/relative", "ONCEQ_GATEWAY_URL"},
		{"ONCEQ_STRIPE_URL", "http://127.0.0.1:12111", "ONCEQ_STRIPE_KEY is empty"},
		{"ONCEQ_STRIPE_KEY", "pk_test_123", "secret (sk_...) or restricted"},
		{"ONCEQ_STRIPE_KEY", "sk_test_123", ""},
		{"ONCEQ_STRIPE_KEY", "rk_live_123", ""},
		{"ONCEQ_QUEUES", "a{b}:1", "must not contain { or }"},
		{"ONCEQ_QUEUES", "ok:1,x}:2", "must not contain { or }"},
		{"ONCEQ_QUEUES", ":1", "empty queue name"},
		{"ONCEQ_QUEUES", "a:1, b:1", "surrounding spaces"},
		{"ONCEQ_QUEUES", "a:0", "weight"},
		{"ONCEQ_QUEUES", "a:-2", "weight"},
		{"ONCEQ_QUEUES", "", "at least one queue"},
		{"ONCEQ_QUEUES", "a:1,b", "ONCEQ_QUEUES"},
		{"ONCEQ_QUEUES", "emails:2", ""},
		{"ONCEQ_CONCURRENCY", "0", "ONCEQ_CONCURRENCY"},
		{"ONCEQ_SHUTDOWN_TIMEOUT", "0s", "ONCEQ_SHUTDOWN_TIMEOUT"},
		{"ONCEQ_LIVENESS", "100ms", "ONCEQ_LIVENESS"},
		{"ONCEQ_LIVENESS", "0s", ""},
		{"ONCEQ_EMBEDDED", "always", "ONCEQ_EMBEDDED"},
		{"ONCEQ_MAXMEMORY_CHECK", "ignore", "ONCEQ_MAXMEMORY_CHECK"},
		{"ONCEQ_DASHBOARD_READONLY", "maybe", "ONCEQ_DASHBOARD_READONLY"},
		{"ONCEQ_POSTGRES_RETENTION", "0s", "ONCEQ_POSTGRES_RETENTION must be positive"},
		{"ONCEQ_POSTGRES_RETENTION", "1h", "shorter than ONCEQ_DONE_TTL"},
		{"ONCEQ_POSTGRES_RETENTION", "24h", ""},
		{"ONCEQ_OUTBOX", "yes", `ONCEQ_OUTBOX must be "on" or "off"`},
		{"ONCEQ_OUTBOX", "on", "ONCEQ_OUTBOX=on needs ONCEQ_POSTGRES_URL"},
		{"ONCEQ_OUTBOX", "off", ""},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			loadWorkerWants(t, map[string]string{tc.key: tc.value}, tc.want)
		})
	}
}

func TestSMTPPair(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ONCEQ_SMTP_ADDR": "s:25", "ONCEQ_SMTP_USER": "u"}, "ONCEQ_SMTP_PASSWORD"},
		{map[string]string{"ONCEQ_SMTP_ADDR": "s:25", "ONCEQ_SMTP_PASSWORD": "p"}, "ONCEQ_SMTP_USER"},
		{map[string]string{"ONCEQ_SMTP_USER": "u", "ONCEQ_SMTP_PASSWORD": "p"}, "ONCEQ_SMTP_ADDR is empty"},
		{map[string]string{"ONCEQ_SMTP_ADDR": "s:25", "ONCEQ_SMTP_USER": "u", "ONCEQ_SMTP_PASSWORD": "p"}, ""},
		{map[string]string{"ONCEQ_SMTP_ADDR": "s:25"}, ""},
	} {
		t.Run(tc.want, func(t *testing.T) { loadWorkerWants(t, tc.env, tc.want) })
	}
}

func TestOnePaymentGateway(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ONCEQ_STRIPE_KEY": "sk_test_1", "ONCEQ_GATEWAY_URL": "https://pay.example"}, "both set"},
		{map[string]string{"ONCEQ_STRIPE_KEY": "sk_test_1", "ONCEQ_STRIPE_URL": "ftp://mock"}, "ONCEQ_STRIPE_URL must be"},
		{map[string]string{"ONCEQ_STRIPE_KEY": "sk_test_1", "ONCEQ_STRIPE_URL": "http://127.0.0.1:12111"}, ""},
	} {
		t.Run(tc.want, func(t *testing.T) { loadWorkerWants(t, tc.env, tc.want) })
	}
}

func TestAdminBeyondLoopbackNeedsToken(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		loopback bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.2:8080", true},
		{"localhost:8080", true},
		{"[::1]:8080", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.5:8080", false},
		{"admin.example:8080", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := (Admin{Addr: tc.addr}).Loopback(); got != tc.loopback {
				t.Errorf("Admin.Loopback() = %v, want %v", got, tc.loopback)
			}
			if got := (API{Addr: tc.addr}).Loopback(); got != tc.loopback {
				t.Errorf("API.Loopback() = %v, want %v", got, tc.loopback)
			}

			setEnv(t, map[string]string{"ONCEQ_ADMIN_ADDR": tc.addr})
			_, err := LoadWorkerFrom(Environ())
			if tc.loopback && err != nil {
				t.Fatalf("loopback without token rejected: %v", err)
			}
			if !tc.loopback {
				wantErr(t, err, "ONCEQ_ADMIN_TOKEN")
			}
			t.Setenv("ONCEQ_ADMIN_TOKEN", "admin-0123456789abcdef")
			if _, err := LoadWorkerFrom(Environ()); err != nil {
				t.Fatalf("with a token: %v", err)
			}
		})
	}
}

func TestAPIBeyondLoopbackNeedsToken(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_API_ADDR": "0.0.0.0:8081"})
	_, err := LoadAPI()
	wantErr(t, err, "ONCEQ_API_TOKENS")

	t.Setenv("ONCEQ_API_TOKENS", "api-0123456789abcdef")
	if _, err := LoadAPI(); err != nil {
		t.Fatalf("with a token: %v", err)
	}
}

func TestAPIValidation(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{"ONCEQ_API_ADDR", "nope"},
		{"ONCEQ_WEBHOOK_TOLERANCE", "0s"},
		{"ONCEQ_MAX_BODY_BYTES", "0"},
		// Below the largest body, that body would never be read.
		{"ONCEQ_WEBHOOK_BODY_BUDGET", "1048575"},
		{"ONCEQ_WEBHOOK_BODY_BUDGET", "32MiB"},
		{"ONCEQ_WEBHOOK_PEER_BUDGET", "1024"},
		{"ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT", "0s"},
		{"ONCEQ_WEBHOOK_BODY_TIMEOUT", "-1s"},
		{"ONCEQ_REPLAY_TTL", "100ms"},
		{"ONCEQ_GITHUB_REPLAY_WINDOW", "500ms"},
		{"ONCEQ_GITHUB_REPLAY_WINDOW", "7d"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			setEnv(t, map[string]string{tc.key: tc.value})
			_, err := LoadAPI()
			wantErr(t, err, tc.key)
		})
	}
	setEnv(t, map[string]string{"ONCEQ_WEBHOOK_PEER_BUDGET": "1048576"})
	if _, err := LoadAPI(); err != nil {
		t.Errorf("a peer budget of ONCEQ_MAX_BODY_BYTES: %v", err)
	}
}

// Each github source, and only those, gets the replay window: 7 days
// unless ONCEQ_GITHUB_REPLAY_WINDOW says otherwise.
func TestGitHubReplayWindow(t *testing.T) {
	env := map[string]string{"ONCEQ_WEBHOOK_SECRETS": "gh:s1,gh2:s2,acme:s3", "ONCEQ_WEBHOOK_SCHEMES": "gh:github,gh2:github"}
	setEnv(t, env)
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	week := 7 * 24 * time.Hour
	if got, want := a.WebhookReplay(), map[string]time.Duration{"gh": week, "gh2": week}; !maps.Equal(got, want) {
		t.Errorf("default: WebhookReplay() = %v, want %v", got, want)
	}
	t.Setenv("ONCEQ_GITHUB_REPLAY_WINDOW", "36h")
	if a, err = LoadAPI(); err != nil {
		t.Fatal(err)
	}
	if got, want := a.WebhookReplay(), map[string]time.Duration{"gh": 36 * time.Hour, "gh2": 36 * time.Hour}; !maps.Equal(got, want) {
		t.Errorf("36h: WebhookReplay() = %v, want %v", got, want)
	}
}

// loadWorkerWants loads the worker's configuration from env and expects an
// error mentioning want, or none when want is "".
func loadWorkerWants(t *testing.T, env map[string]string, want string) {
	t.Helper()
	setEnv(t, env)
	_, err := LoadWorkerFrom(Environ())
	if want == "" {
		if err != nil {
			t.Fatalf("rejected: %v", err)
		}
		return
	}
	wantErr(t, err, want)
}

func TestWebhookSchemes(t *testing.T) {
	std := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // "" parts: accepted
	}{
		{"every scheme", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "a:s1,b:s2,c:s3,d:" + std,
			"ONCEQ_WEBHOOK_SCHEMES": "a:onceq,b:stripe,c:github,d:standard"}, nil},
		{"unknown scheme", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "a:s1", "ONCEQ_WEBHOOK_SCHEMES": "a:svix"},
			[]string{"ONCEQ_WEBHOOK_SCHEMES", `"svix"`, "standard"}},
		{"scheme without secrets", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "a:s1", "ONCEQ_WEBHOOK_SCHEMES": "b:stripe"},
			[]string{"ONCEQ_WEBHOOK_SCHEMES", `"b"`, "ONCEQ_WEBHOOK_SECRETS"}},
		{"standard secret without prefix", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "d:MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			"ONCEQ_WEBHOOK_SCHEMES": "d:standard"}, []string{"ONCEQ_WEBHOOK_SECRETS", "secret 1 of d", "whsec_"}},
		{"standard secret not base64", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "d:" + std + ",d:whsec_not*base64",
			"ONCEQ_WEBHOOK_SCHEMES": "d:standard"}, []string{"ONCEQ_WEBHOOK_SECRETS", "secret 2 of d"}},
		{"id field for a stripe source", map[string]string{"ONCEQ_WEBHOOK_SECRETS": "b:s2", "ONCEQ_WEBHOOK_SCHEMES": "b:stripe",
			"ONCEQ_WEBHOOK_ID_FIELDS": "b:event_id"}, []string{"ONCEQ_WEBHOOK_ID_FIELDS", `"b"`, "stripe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			a, err := LoadAPI()
			if tc.want != nil {
				wantErr(t, err, tc.want...)
				if strings.Contains(err.Error(), "MfKQ9r8") || strings.Contains(err.Error(), "not*base64") {
					t.Fatalf("error quotes a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.WebhookScheme("d") != SchemeStandard || a.WebhookScheme("a") != SchemeOnceq || a.WebhookScheme("unlisted") != SchemeOnceq {
				t.Fatalf("schemes %v", a.WebhookSchemes)
			}
		})
	}
}

// A named entry ending in :read-all is an operator's; the suffix is not
// part of the token, and one client is read-all in every entry or none.
func TestReadAllTokens(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_API_TOKENS": "ops:ops-token-0123456789:read-all,shop:shop-token-0123456789"})
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	want := []APIClient{{Name: "ops", Token: "ops-token-0123456789", ReadAll: true}, {Name: "shop", Token: "shop-token-0123456789"}}
	if got := a.Clients(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Clients() = %+v, want %+v", got, want)
	}
	setEnv(t, map[string]string{"ONCEQ_API_TOKENS": "ops:old-token-0123456789:read-all,ops:new-token-0123456789"})
	_, err = LoadAPI()
	wantErr(t, err, "read-all in one entry")
}

// A named entry ending in :operator reads every job and resets keys; the
// suffix is not part of the token, one client is an operator in every
// entry or none, and an entry is read-all or operator, not both.
func TestOperatorTokens(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_API_TOKENS": "ops:ops-token-0123456789:operator,audit:audit-token-0123456789:read-all,shop:shop-token-0123456789"})
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	want := []APIClient{{Name: "ops", Token: "ops-token-0123456789", Operator: true},
		{Name: "audit", Token: "audit-token-0123456789", ReadAll: true}, {Name: "shop", Token: "shop-token-0123456789"}}
	if got := a.Clients(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Clients() = %+v, want %+v", got, want)
	}
	for entries, msg := range map[string]string{
		"ops:old-token-0123456789:operator,ops:new-token-0123456789":          "operator in one entry",
		"ops:old-token-0123456789:operator,ops:new-token-0123456789:read-all": "operator in one entry and read-all",
		"ops:ops-token-0123456789:read-all:operator":                          "not both",
		"ops:ops-token-0123456789:operator:read-all":                          "not both",
	} {
		setEnv(t, map[string]string{"ONCEQ_API_TOKENS": entries})
		_, err = LoadAPI()
		wantErr(t, err, msg)
		if strings.Contains(err.Error(), "ops-token") || strings.Contains(err.Error(), "old-token") {
			t.Fatalf("error %q quotes a token", err)
		}
	}
}
