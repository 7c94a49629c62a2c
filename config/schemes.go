package config

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Webhook signature schemes, the values of ONCEQ_WEBHOOK_SCHEMES.
const (
	SchemeOnceq    = "onceq"
	SchemeStripe   = "stripe"
	SchemeGitHub   = "github"
	SchemeStandard = "standard"
)

// WebhookSchemeNames lists the schemes ONCEQ_WEBHOOK_SCHEMES accepts.
func WebhookSchemeNames() []string {
	return []string{SchemeOnceq, SchemeStripe, SchemeGitHub, SchemeStandard}
}

// standardSecretPrefix starts a Standard Webhooks secret as senders show it.
const standardSecretPrefix = "whsec_"

// WebhookScheme is the scheme of source: SchemeOnceq unless
// ONCEQ_WEBHOOK_SCHEMES names another.
func (a API) WebhookScheme(source string) string {
	if sc, ok := a.WebhookSchemes[source]; ok {
		return sc
	}
	return SchemeOnceq
}

// WebhookReplay is the replay window of each github source
// (tasks.Windows.WebhookReplay).
func (a API) WebhookReplay() map[string]time.Duration {
	m := map[string]time.Duration{}
	for src, sc := range a.WebhookSchemes {
		if sc == SchemeGitHub {
			m[src] = a.GitHubReplayWindow
		}
	}
	return m
}

func (a API) validateSchemes() error {
	for _, src := range slices.Sorted(maps.Keys(a.WebhookSchemes)) {
		sc := a.WebhookSchemes[src]
		if !slices.Contains(WebhookSchemeNames(), sc) {
			return fmt.Errorf("config: ONCEQ_WEBHOOK_SCHEMES: source %q has unknown scheme %q (want one of %s)",
				src, sc, strings.Join(WebhookSchemeNames(), ", "))
		}
		if _, ok := a.WebhookSecrets[src]; !ok {
			return fmt.Errorf("config: ONCEQ_WEBHOOK_SCHEMES names source %q, which has no ONCEQ_WEBHOOK_SECRETS entry", src)
		}
		if sc != SchemeStandard {
			continue
		}
		for i, s := range a.WebhookSecrets[src] {
			// The secret itself is never quoted.
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, standardSecretPrefix))
			if !strings.HasPrefix(s, standardSecretPrefix) || err != nil || len(key) == 0 {
				return fmt.Errorf("config: ONCEQ_WEBHOOK_SECRETS secret %d of %s: a standard source's secret is the %s<base64> string its sender shows", i+1, src, standardSecretPrefix)
			}
		}
	}
	return nil
}
