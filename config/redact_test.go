package config

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestRedactedHidesSecrets(t *testing.T) {
	secretValues := []string{"urlpw", "sentpw", "redispw", "admintok", "smtppw", "gwuser", "gwpw", "gwkey",
		"apitok1", "apitok2", "ghsecret"}
	setEnv(t, map[string]string{
		"ONCEQ_REDIS_URL":       "redis-sentinel://app:urlpw@h1,h2/m?db=1&sentinel_password=sentpw",
		"ONCEQ_REDIS_PASSWORD":  "redispw",
		"ONCEQ_ADMIN_ADDR":      "0.0.0.0:8080",
		"ONCEQ_ADMIN_TOKEN":     "admintok-0123456789",
		"ONCEQ_SMTP_ADDR":       "smtp:25",
		"ONCEQ_SMTP_USER":       "mailer",
		"ONCEQ_SMTP_PASSWORD":   "smtppw",
		"ONCEQ_GATEWAY_URL":     "https://gwuser:gwpw@pay.example/v1?api_key=gwkey&mode=live",
		"ONCEQ_GATEWAY_TOKEN":   "gwtok",
		"ONCEQ_API_TOKENS":      "apitok1-0123456789,apitok2-0123456789",
		"ONCEQ_WEBHOOK_SECRETS": "github:ghsecret",
	})
	secretValues = append(secretValues, "gwtok")
	w, err := LoadWorkerFrom(Environ())
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadProducer()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]map[string]string{"Worker": w.Redacted(), "API": a.Redacted(), "Producer": p.Redacted()} {
		for k, v := range m {
			for _, s := range secretValues {
				if strings.Contains(v, s) {
					t.Errorf("%s.Redacted()[%s] = %q reveals %q", name, k, v, s)
				}
			}
		}
	}

	wr := w.Redacted()
	for k, want := range map[string]string{
		"ONCEQ_REDIS_URL":      "redis-sentinel://***@h1,h2/m?db=1&sentinel_password=***",
		"ONCEQ_REDIS_PASSWORD": "***",
		"ONCEQ_ADMIN_TOKEN":    "***",
		"ONCEQ_SMTP_USER":      "mailer",
		"ONCEQ_GATEWAY_URL":    "https://***@pay.example/v1?api_key=***&mode=live",
		"ONCEQ_QUEUES":         "critical:6,default:3,low:1",
		"ONCEQ_LEASE":          "1m0s",
		"ONCEQ_CONCURRENCY":    "10",
		"ONCEQ_ADMIN_ADDR":     "0.0.0.0:8080",
	} {
		if wr[k] != want {
			t.Errorf("Worker.Redacted()[%s] = %q, want %q", k, wr[k], want)
		}
	}
	ar := a.Redacted()
	if ar["ONCEQ_API_TOKENS"] != "***" || ar["ONCEQ_WEBHOOK_SECRETS"] != "github:***" {
		t.Errorf("API tokens, webhook secrets redacted to %q, %q", ar["ONCEQ_API_TOKENS"], ar["ONCEQ_WEBHOOK_SECRETS"])
	}

	var keys []string
	for _, v := range variables(&w) {
		keys = append(keys, v.key)
	}
	slices.Sort(keys)
	if got := slices.Sorted(maps.Keys(wr)); !slices.Equal(got, keys) {
		t.Errorf("Worker.Redacted() has keys %q, want %q", got, keys)
	}
}

func TestRedactedUnsetSecretsEmpty(t *testing.T) {
	cleanEnv(t)
	a, err := LoadAPI()
	if err != nil {
		t.Fatal(err)
	}
	r := a.Redacted()
	for _, k := range []string{"ONCEQ_REDIS_PASSWORD", "ONCEQ_API_TOKENS", "ONCEQ_WEBHOOK_SECRETS", "ONCEQ_REDIS_URL"} {
		if v, ok := r[k]; !ok || v != "" {
			t.Errorf("Redacted()[%s] = %q, %v; want present and empty", k, v, ok)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"redis://h:1/0", "redis://h:1/0"},
		{"redis://user:pw@h:1/0", "redis://***@h:1/0"},
		{"redis://pw@h:1", "redis://***@h:1"},
		{"rediss://:p@ss@h:1?read_timeout=1s", "rediss://***@h:1?read_timeout=1s"},
		{"https://h/x?token=t&a=b#frag", "https://h/x?token=***&a=b"},
		{"https://h/x?sentinel%5Fpassword=t", "https://h/x?sentinel%5Fpassword=***"},
		{"not a url with pw", "***"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
