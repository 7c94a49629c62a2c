package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func defaultWorker() Worker {
	return Worker{
		Redis: Redis{WaitTimeout: time.Second, DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second},
		Log:   Log{Env: "production", Level: "info"},
		Dedup: Dedup{Lease: 60 * time.Second, DoneTTL: 24 * time.Hour, ResultTTL: time.Hour, FailedTTL: time.Hour,
			MaxResultBytes: 65536, UniqueWindow: 24 * time.Hour, PaymentIDWindow: 24 * time.Hour, PaymentIDScope: "global",
			PaymentRateWindow: 60 * time.Second, ScanWindow: 30 * time.Second, QueueShards: 1},
		Postgres:    Postgres{Ledger: true, Retention: 720 * time.Hour},
		Admin:       Admin{Addr: "127.0.0.1:8080", DashboardReadOnly: true},
		Tasks:       Tasks{SMTPFrom: "onceq@localhost", OutboxDir: "outbox", ScanRoot: ".", ScanMaxBytes: 64 << 20},
		Queues:      map[string]int{"critical": 6, "default": 3, "low": 1},
		Concurrency: 10, ShutdownTimeout: 25 * time.Second, Embedded: "auto", MaxmemoryPolicy: "warn", Liveness: 3 * time.Second,
		Outbox: "off", TaskLog: true,
	}
}

func defaultAPI() API {
	w := defaultWorker()
	return API{Redis: w.Redis, Log: w.Log, Dedup: w.Dedup, Postgres: w.Postgres, Addr: "127.0.0.1:8081",
		WebhookTolerance: 5 * time.Minute, MaxBodyBytes: 1 << 20, WebhookBodyBudget: 32 << 20, ReplayTTL: 24 * time.Hour,
		WebhookFirstByteTimeout: 5 * time.Second, WebhookBodyTimeout: 10 * time.Second, GitHubReplayWindow: 7 * 24 * time.Hour}
}

func TestDefaults(t *testing.T) {
	cleanEnv(t)
	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultWorker(); !reflect.DeepEqual(w, want) {
		t.Errorf("LoadWorkerFrom(Environ()) =\n%+v\nwant\n%+v", w, want)
	}
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultAPI(); !reflect.DeepEqual(a, want) {
		t.Errorf("LoadAPI() =\n%+v\nwant\n%+v", a, want)
	}
	p, err := LoadProducer()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Producer{defaultWorker().Redis, defaultWorker().Log, defaultWorker().Dedup, defaultWorker().Postgres}); !reflect.DeepEqual(p, want) {
		t.Errorf("LoadProducer() =\n%+v\nwant\n%+v", p, want)
	}
}

// allKnobs sets every variable but ONCEQ_REDIS_CLUSTER_NODES (exclusive with
// the URL) and the Stripe pair (exclusive with the gateway URL) to a value
// other than its default.
var allKnobs = map[string]string{
	"ONCEQ_REDIS_URL": "redis://u:pw@redis.example:6380/3", "ONCEQ_REDIS_PASSWORD": "override-pw",
	"ONCEQ_REDIS_DIAL_TIMEOUT": "7s", "ONCEQ_REDIS_READ_TIMEOUT": "4s", "ONCEQ_REDIS_WRITE_TIMEOUT": "6s",
	"ONCEQ_REDIS_MIN_REPLICAS": "1", "ONCEQ_REDIS_WAIT_TIMEOUT": "2s",
	"ONCEQ_ENV": "development", "ONCEQ_LOG_LEVEL": "debug",
	"ONCEQ_LEASE": "90s", "ONCEQ_DONE_TTL": "12h", "ONCEQ_RESULT_TTL": "2h", "ONCEQ_FAILED_TTL": "2h",
	"ONCEQ_MAX_RESULT_BYTES": "1024", "ONCEQ_ON_REPEAT": "email:send=replace", "ONCEQ_UNIQUE_WINDOW": "36h", "ONCEQ_PAYMENT_ID_WINDOW": "48h", "ONCEQ_PAYMENT_ID_SCOPE": "client",
	"ONCEQ_PAYMENT_RATE_WINDOW": "90s", "ONCEQ_SCAN_WINDOW": "45s", "ONCEQ_QUEUE_SHARDS": "8", "ONCEQ_TASK_LOG": "false", "ONCEQ_KEEP_COMPLETED": "true",
	"ONCEQ_WEBHOOK_ID_FIELDS": "acme:event_id", "ONCEQ_WEBHOOK_SCHEMES": "github:github,stripe:stripe",
	"ONCEQ_ADMIN_ADDR": "0.0.0.0:9090", "ONCEQ_ADMIN_TOKEN": "admintok-0123456789", "ONCEQ_DASHBOARD_READONLY": "false",
	"ONCEQ_SMTP_ADDR": "smtp.example:587", "ONCEQ_SMTP_USER": "mailer", "ONCEQ_SMTP_PASSWORD": "smtppw",
	"ONCEQ_SMTP_FROM": "jobs@example.com", "ONCEQ_OUTBOX_DIR": "/var/outbox", "ONCEQ_SCAN_ROOT": "/data", "ONCEQ_SCAN_SHARED_ROOT": "true",
	"ONCEQ_SCAN_SIGNATURES": "/etc/sigs.txt", "ONCEQ_SCAN_MAX_BYTES": "1048576", "ONCEQ_CLAMD_ADDR": "clamd:3310",
	"ONCEQ_GATEWAY_URL": "https://pay.example/v1", "ONCEQ_GATEWAY_TOKEN": "gwtok", "ONCEQ_HTTP_HOSTS": "onceq.test,box.lan",
	"ONCEQ_QUEUES": "high:5,bulk:1", "ONCEQ_STRICT_PRIORITY": "true", "ONCEQ_CONCURRENCY": "32",
	"ONCEQ_SHUTDOWN_TIMEOUT": "40s", "ONCEQ_EMBEDDED": "never", "ONCEQ_MAXMEMORY_CHECK": "refuse", "ONCEQ_LIVENESS": "5s", "ONCEQ_OUTBOX": "on",
	"ONCEQ_API_ADDR": "0.0.0.0:9091", "ONCEQ_API_TOKENS": "t1-0123456789abcdef,alice:t2-0123456789abcdef", "ONCEQ_WEBHOOK_SECRETS": "acme:acs,github:ghs,stripe:sts,stripe:sts2",
	"ONCEQ_WEBHOOK_TOLERANCE": "2m", "ONCEQ_GITHUB_REPLAY_WINDOW": "72h", "ONCEQ_MAX_BODY_BYTES": "2048", "ONCEQ_WEBHOOK_BODY_BUDGET": "4096", "ONCEQ_WEBHOOK_PEER_BUDGET": "3072",
	"ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT": "3s", "ONCEQ_WEBHOOK_BODY_TIMEOUT": "7s", "ONCEQ_REPLAY_TTL": "6h",
	"ONCEQ_POSTGRES_URL": "postgres://app:pgpw@db.example/app", "ONCEQ_POSTGRES_MAX_CONNS": "40",
	"ONCEQ_POSTGRES_LEDGER": "false", "ONCEQ_POSTGRES_RETENTION": "1000h",
}

func TestEveryKnobParses(t *testing.T) {
	covered := slices.Sorted(maps.Keys(allKnobs))
	covered = append(covered, "ONCEQ_REDIS_CLUSTER_NODES")            // TestClusterNodesParse
	covered = append(covered, "ONCEQ_STRIPE_KEY", "ONCEQ_STRIPE_URL") // TestStripeKnobsParse
	slices.Sort(covered)
	if !slices.Equal(covered, known()) {
		t.Fatalf("test covers %v\nbut the known variables are %v", covered, known())
	}

	setEnv(t, allKnobs)
	redis := Redis{URL: "redis://u:pw@redis.example:6380/3", Password: "override-pw", MinReplicas: 1, WaitTimeout: 2 * time.Second,
		DialTimeout: 7 * time.Second, ReadTimeout: 4 * time.Second, WriteTimeout: 6 * time.Second}
	log := Log{Env: "development", Level: "debug"}
	dedup := Dedup{Lease: 90 * time.Second, DoneTTL: 12 * time.Hour, ResultTTL: 2 * time.Hour, FailedTTL: 2 * time.Hour,
		MaxResultBytes: 1024, UniqueWindow: 36 * time.Hour, PaymentIDWindow: 48 * time.Hour, PaymentIDScope: "client",
		PaymentRateWindow: 90 * time.Second, ScanWindow: 45 * time.Second, OnRepeat: "email:send=replace", QueueShards: 8, KeepCompleted: true}
	pg := Postgres{URL: "postgres://app:pgpw@db.example/app", MaxConns: 40, Ledger: false, Retention: 1000 * time.Hour}
	hosts := HTTPHosts{Hosts: []string{"onceq.test", "box.lan"}}
	wantWorker := Worker{Redis: redis, Log: log, Dedup: dedup, Postgres: pg,
		Admin: Admin{HTTPHosts: hosts, Addr: "0.0.0.0:9090", Token: "admintok-0123456789", DashboardReadOnly: false},
		Tasks: Tasks{SMTPAddr: "smtp.example:587", SMTPUser: "mailer", SMTPPassword: "smtppw",
			SMTPFrom: "jobs@example.com", OutboxDir: "/var/outbox", ScanRoot: "/data", ScanSharedRoot: true,
			ScanSignatures: "/etc/sigs.txt", ScanMaxBytes: 1 << 20, ClamdAddr: "clamd:3310",
			GatewayURL: "https://pay.example/v1", GatewayToken: "gwtok"},
		Queues: map[string]int{"high": 5, "bulk": 1}, StrictPriority: true, Concurrency: 32,
		ShutdownTimeout: 40 * time.Second, Embedded: "never", MaxmemoryPolicy: "refuse", Liveness: 5 * time.Second,
		Outbox: "on",
	}
	wantAPI := API{Redis: redis, Log: log, Dedup: dedup, Postgres: pg, HTTPHosts: hosts, Addr: "0.0.0.0:9091",
		Tokens: []string{"t1-0123456789abcdef", "alice:t2-0123456789abcdef"}, WebhookSecrets: WebhookSecrets{"acme": {"acs"}, "github": {"ghs"}, "stripe": {"sts", "sts2"}},
		WebhookSchemes:   map[string]string{"github": SchemeGitHub, "stripe": SchemeStripe},
		WebhookIDFields:  map[string]string{"acme": "event_id"},
		WebhookTolerance: 2 * time.Minute, GitHubReplayWindow: 72 * time.Hour, MaxBodyBytes: 2048, WebhookBodyBudget: 4096, ReplayTTL: 6 * time.Hour,
		WebhookPeerBudget: 3072, WebhookFirstByteTimeout: 3 * time.Second, WebhookBodyTimeout: 7 * time.Second}

	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w, wantWorker) {
		t.Errorf("LoadWorkerFrom(Environ()) =\n%+v\nwant\n%+v", w, wantWorker)
	}
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, wantAPI) {
		t.Errorf("LoadAPI() =\n%+v\nwant\n%+v", a, wantAPI)
	}
	p, err := LoadProducer()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Producer{redis, log, dedup, pg}); !reflect.DeepEqual(p, want) {
		t.Errorf("LoadProducer() =\n%+v\nwant\n%+v", p, want)
	}
}

func TestClusterNodesParse(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_REDIS_CLUSTER_NODES": "c1:7000, c2:7001"})
	p, err := LoadProducer()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1:7000", " c2:7001"}; !slices.Equal(p.ClusterNodes, want) {
		t.Errorf("ClusterNodes = %q, want %q", p.ClusterNodes, want)
	}
	o, err := p.UniversalOptions()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1:7000", "c2:7001"}; !slices.Equal(o.Addrs, want) || !o.IsClusterMode {
		t.Errorf("Addrs = %q, IsClusterMode = %v; want %q, true", o.Addrs, o.IsClusterMode, want)
	}
}

// Kubernetes service links and generic names must not configure anything.
func TestUnprefixedIgnored(t *testing.T) {
	setEnv(t, map[string]string{
		"REDIS_PORT": "tcp://10.0.0.1:6379", "REDIS_URL": "redis://10.0.0.1:6379", "REDIS_PASSWORD": "x",
		"ENV": "development", "LOG_LEVEL": "debug", "CONCURRENCY": "99", "QUEUES": "x:1",
		"ADMIN_ADDR": "0.0.0.0:1", "API_ADDR": "0.0.0.0:2", "LEASE": "5s",
	})
	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultWorker(); !reflect.DeepEqual(w, want) {
		t.Errorf("LoadWorkerFrom(Environ()) =\n%+v\nwant the defaults\n%+v", w, want)
	}
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultAPI(); !reflect.DeepEqual(a, want) {
		t.Errorf("LoadAPI() =\n%+v\nwant the defaults\n%+v", a, want)
	}
	o, err := w.UniversalOptions()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:6379"}; !slices.Equal(o.Addrs, want) {
		t.Errorf("Addrs = %q, want %q", o.Addrs, want)
	}
}

func TestUnknownVariables(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reject bool
	}{
		{"ONCEQ_FOO", true},
		{"ONCEQ_REDIS_ULR", true},
		{"ONCEQ_CONCURENCY", true},
		{"ONCEQ_ADMIN_PORT_X", true},
		{"ONCEQ_", true},
		// Kubernetes service links for Services named onceq, onceq-api, onceq-redis.
		{"ONCEQ_SERVICE_HOST", false},
		{"ONCEQ_PORT", false},
		{"ONCEQ_PORT_8080_TCP_ADDR", false},
		{"ONCEQ_API_SERVICE_PORT_HTTP", false},
		{"ONCEQ_REDIS_PORT", false},
		// The test harness.
		{"ONCEQ_TEST_REDIS_URL", false},
		{"ONCEQ_REQUIRE_REDIS", false},
		{"ONCEQ_FAULT_TESTS", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, map[string]string{tc.name: "tcp://10.0.0.1:6379"})
			for _, load := range []func() error{
				func() error { _, err := LoadWorkerFrom(Environ()); return err },
				func() error { _, err := LoadAPI(); return err },
				func() error { _, err := LoadProducer(); return err },
			} {
				err := load()
				switch {
				case tc.reject:
					wantErr(t, err, "unknown variable "+tc.name)
				case err != nil:
					t.Fatalf("got %v, want %s ignored", err, tc.name)
				}
			}
		})
	}
}

// A variable only one binary reads is known to all: one ConfigMap feeds both.
func TestKnownSetIsUnion(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_API_ADDR": "127.0.0.1:1", "ONCEQ_QUEUES": "a:1"})
	if _, err := LoadProducer(); err != nil {
		t.Errorf("LoadProducer: %v", err)
	}
}

func TestStripeKnobsParse(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_STRIPE_KEY": "sk_test_abc", "ONCEQ_STRIPE_URL": "http://127.0.0.1:12111"})
	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	if w.StripeKey != "sk_test_abc" || w.StripeURL != "http://127.0.0.1:12111" {
		t.Errorf("Stripe knobs = %q, %q", w.StripeKey, w.StripeURL)
	}
	if r := fmt.Sprint(w.Redacted()); strings.Contains(r, "sk_test_abc") {
		t.Errorf("Redacted() reveals the Stripe key: %s", r)
	}
}
