package k8s_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of Prometheus Operator's ServiceMonitor the
// manifests use.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval,omitempty"`
			Authorization *struct {
				Type        string                   `json:"type"`
				Credentials corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is Prometheus Operator's PrometheusRule; its spec is a
// Prometheus rule file, which promtool checks.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// The prod overlay scrapes the worker and the API through their Services
// with the tokens their /metrics want, from the Secret operators create.
func TestServiceMonitors(t *testing.T) {
	m := overlay(t, "prod")
	sms := all[*serviceMonitor](m)
	scraped := map[string]bool{}
	for _, sm := range sms {
		var svc *corev1.Service
		for _, s := range all[*corev1.Service](m) {
			if matchesLabels(sm.Spec.Selector.MatchLabels, s.Labels) {
				if svc != nil {
					t.Errorf("ServiceMonitor %s selects Services %s and %s", sm.Name, svc.Name, s.Name)
				}
				svc = s
			}
		}
		if svc == nil {
			t.Errorf("ServiceMonitor %s selects no Service", sm.Name)
			continue
		}
		component := svc.Labels["app.kubernetes.io/component"]
		scraped[component] = true
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("%s: port %q is not a port of Service %s", sm.Name, ep.Port, svc.Name)
			}
			if ep.Path != "/metrics" || ep.Authorization == nil || ep.Authorization.Type != "Bearer" ||
				ep.Authorization.Credentials.Name != "onceq-secrets" {
				t.Errorf("%s: want /metrics with a Bearer token from onceq-secrets", sm.Name)
				continue
			}
			token, ok := prodSecret[ep.Authorization.Credentials.Key]
			if !ok {
				t.Errorf("%s: key %s is not in the Secret README.md tells operators to create", sm.Name, ep.Authorization.Credentials.Key)
			}
			if component == "worker" && token != prodSecret["ONCEQ_ADMIN_TOKEN"] {
				t.Errorf("%s: the worker's /metrics wants ONCEQ_ADMIN_TOKEN", sm.Name)
			}
			if component == "api" && !slices.Contains(apiTokens(prodSecret["ONCEQ_API_TOKENS"]), token) {
				t.Errorf("%s: %s is none of ONCEQ_API_TOKENS, which the API's /metrics wants", sm.Name, ep.Authorization.Credentials.Key)
			}
		}
	}
	if !scraped["worker"] || !scraped["api"] {
		t.Errorf("scraped components %v, want worker and api", scraped)
	}
}

func apiTokens(v string) []string {
	var ts []string
	for _, e := range strings.Split(v, ",") {
		_, tok, ok := strings.Cut(e, ":")
		if !ok {
			tok = e
		}
		ts = append(ts, tok)
	}
	return ts
}

// The prod overlay's alerts: each wanted alert is there, and promtool
// checks the rule file clean. CI installs promtool (.ci/run).
func TestPrometheusRules(t *testing.T) {
	rules := all[*prometheusRule](overlay(t, "prod"))
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules in prod, want 1", len(rules))
	}
	var alerts []string
	for _, g := range rules[0].Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	for _, want := range []string{"OnceqKeyConflicts", "OnceqLeaseLost", "OnceqQueueLatencyHigh",
		"OnceqArchivedGrowing", "OnceqBlockedKeys", "OnceqHandlerErrors",
		"OnceqTargetDown", "OnceqRedisUnreachable", "OnceqLivenessWritesFailing"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" { // CI: every tool the tests use is installed
			t.Fatal("no promtool on PATH")
		}
		t.Skip("no promtool on PATH (go install github.com/prometheus/prometheus/cmd/promtool)")
	}
	b, err := yaml.Marshal(rules[0].Spec)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "onceq.rules.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", "--lint=all", "--lint-fatal", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// The prod overlay's alerts on series as the pods export them: a target
// Prometheus cannot scrape, a daemon whose Redis is unreachable or refuses
// writes, and a worker that cannot write its liveness key each fire for
// their pod alone; a producer's key conflict fires, a client reusing an
// Idempotency-Key with another body (side api, answered 422) does not.
func TestPrometheusAlertsFire(t *testing.T) {
	promtool := promtoolPath(t)
	rules := all[*prometheusRule](overlay(t, "prod"))
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules in prod, want 1", len(rules))
	}
	dir := t.TempDir()
	b, err := yaml.Marshal(rules[0].Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "onceq.rules.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	in := []series{
		{`up{job="onceq-api",namespace="onceq",pod="api-1"}`, "1 0x19"},
		{`up{job="onceq-dashboard",namespace="onceq",pod="worker-1"}`, "1x20"},
		{`onceq_redis_up{job="onceq-dashboard",namespace="onceq",pod="worker-1"}`, "1 1 0x18"},
		{`onceq_redis_up{job="onceq-dashboard",namespace="onceq",pod="worker-2"}`, "1x20"},
		{`onceq_liveness_refresh_failures_total{job="onceq-dashboard",namespace="onceq",pod="worker-1"}`, "0 0 0+3x18"},
		{`onceq_liveness_refresh_failures_total{job="onceq-dashboard",namespace="onceq",pod="worker-2"}`, "0x20"},
		{`onceq_dedup_decisions_total{side="api",key_namespace="http",outcome="conflict",pod="api-1"}`, "0 0+1x19"},
		{`onceq_dedup_decisions_total{side="producer",key_namespace="payment:charge",outcome="conflict",pod="api-1"}`, "0 0 1x18"},
	}
	firing := []sample{
		{`ALERTS{alertname="OnceqTargetDown",alertstate="firing",job="onceq-api",namespace="onceq",pod="api-1",severity="warning"}`, 1},
		{`ALERTS{alertname="OnceqRedisUnreachable",alertstate="firing",job="onceq-dashboard",namespace="onceq",pod="worker-1",severity="critical"}`, 1},
		{`ALERTS{alertname="OnceqLivenessWritesFailing",alertstate="firing",namespace="onceq",pod="worker-1",severity="warning"}`, 1},
		{`ALERTS{alertname="OnceqKeyConflicts",alertstate="firing",key_namespace="payment:charge",side="producer",severity="warning"}`, 1},
	}
	test := map[string]any{
		"rule_files":          []string{"onceq.rules.yaml"},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{"interval": "1m", "input_series": in,
			"promql_expr_test": []any{map[string]any{"expr": `ALERTS{alertstate="firing"}`, "eval_time": "10m", "exp_samples": firing}}}},
	}
	if b, err = yaml.Marshal(test); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "alerts.test.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", path)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on the alerts: %v\n%s", err, out)
	}
}
