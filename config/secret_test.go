package config

import (
	"slices"
	"strings"
	"testing"
)

func TestSecretsFromTags(t *testing.T) {
	want := []string{"ONCEQ_ADMIN_TOKEN", "ONCEQ_API_TOKENS", "ONCEQ_GATEWAY_TOKEN",
		"ONCEQ_POSTGRES_URL", "ONCEQ_REDIS_PASSWORD", "ONCEQ_SMTP_PASSWORD", "ONCEQ_STRIPE_KEY", "ONCEQ_WEBHOOK_SECRETS"}
	if got := secrets(); !slices.Equal(got, want) {
		t.Errorf("secrets() = %q, want %q", got, want)
	}
}

func TestEmptySecretRejected(t *testing.T) {
	for _, key := range secrets() {
		for _, value := range []string{"", " ", "\n"} {
			t.Run(key+"="+strings.TrimSpace(value), func(t *testing.T) {
				setEnv(t, map[string]string{key: value})
				_, err := LoadWorkerFrom(Environ())
				wantErr(t, err, key, "empty")
				_, err = LoadAPI()
				wantErr(t, err, key, "empty")
			})
		}
		t.Run(key+" trailing newline", func(t *testing.T) {
			setEnv(t, map[string]string{key: "s3cr3t\n"})
			_, err := LoadAPI()
			wantErr(t, err, key, "whitespace")
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q reveals the secret", err)
			}
		})
	}
}

func TestSecretListEntries(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ONCEQ_API_TOKENS": "a-0123456789abcdef,,b-0123456789abcdef"}, "ONCEQ_API_TOKENS entry 2"},
		{map[string]string{"ONCEQ_API_TOKENS": "a-0123456789abcdef, b-0123456789abcdef"}, "ONCEQ_API_TOKENS entry 2"},
		{map[string]string{"ONCEQ_WEBHOOK_SECRETS": "github:"}, "ONCEQ_WEBHOOK_SECRETS secret 1 of github"},
		{map[string]string{"ONCEQ_WEBHOOK_SECRETS": "github:old,github:"}, "ONCEQ_WEBHOOK_SECRETS secret 2 of github"},
		{map[string]string{"ONCEQ_API_TOKENS": "alice:short"}, "ONCEQ_API_TOKENS entry 1 (alice) is shorter than 16 bytes"},
		{map[string]string{"ONCEQ_API_TOKENS": "a-0123456789abcdef,alice:a-0123456789abcdef"}, "the token is given twice"},

		{map[string]string{"ONCEQ_WEBHOOK_SECRETS": "git hub:x"}, "source \"git hub\""},
		{map[string]string{"ONCEQ_WEBHOOK_SECRETS": "a/b:x"}, "source \"a/b\""},
	} {
		t.Run(tc.want, func(t *testing.T) {
			setEnv(t, tc.env)
			_, err := LoadAPI()
			wantErr(t, err, tc.want)
		})
	}
}

func TestShortAdminTokenRefused(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_ADMIN_TOKEN": "x"})
	_, err := LoadWorkerFrom(Environ())
	wantErr(t, err, "ONCEQ_ADMIN_TOKEN is shorter than 16 bytes")
}

// envconfig quotes raw values in its errors; a secret must not reach a log.
func TestParseErrorHidesSecret(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_WEBHOOK_SECRETS": "github:s3cr3t:more"})
	_, err := LoadAPI()
	wantErr(t, err, "ONCEQ_WEBHOOK_SECRETS", "not shown")
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error %q reveals the secret", err)
	}

	setEnv(t, map[string]string{"ONCEQ_LEASE": "soon"})
	_, err = LoadWorkerFrom(Environ())
	wantErr(t, err, "ONCEQ_LEASE", `"soon"`)
}
