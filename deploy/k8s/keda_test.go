package k8s_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// configuredQueues are the worker's queues as its rendered environment sets them.
func configuredQueues(t *testing.T, m *manifests) []string {
	t.Helper()
	env := envOf(t, m, onceqContainer(t, findWorkload(t, m, "Deployment", "onceq-worker")))
	v, ok := env.vars["ONCEQ_QUEUES"]
	if !ok {
		t.Fatalf("%s: the worker's environment has no ONCEQ_QUEUES", m.name)
	}
	var qs []string
	for _, pair := range strings.Split(v, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(pair), ":")
		qs = append(qs, name)
	}
	return qs
}

// promtoolPath is promtool, or a skip outside CI.
func promtoolPath(t *testing.T) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" { // CI: every tool the tests use is installed
			t.Fatal("no promtool on PATH")
		}
		t.Skip("no promtool on PATH (go install github.com/prometheus/prometheus/cmd/promtool)")
	}
	return promtool
}

// checkScaleQueries runs each queue's trigger query (queries[q]) through
// promtool on gauges as the worker pods of namespace ns export them: two
// pods, every queue with its own pending count. A queue that runs scales
// on its own pending tasks; paused, on none; without its paused gauge the
// query is empty, which the trigger (ignoreNullValues "false") reports as
// an error rather than 0. Gauges of another namespace never count.
func checkScaleQueries(t *testing.T, ns string, queues []string, queries map[string]string) {
	t.Helper()
	promtool := promtoolPath(t)
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	var in []series
	var exprs []exprTest
	for i, q := range queues {
		pending := 100 * (i + 1)
		for _, pod := range []string{"w1", "w2"} {
			in = append(in,
				series{fmt.Sprintf(`onceq_queue_size{namespace=%q,pod=%q,queue=%q,state="pending"}`, ns, pod, q), fmt.Sprintf("%d %d %d", pending, pending, pending)},
				// Running at 0m, paused at 1m, its gauge gone (stale) at 2m.
				series{fmt.Sprintf(`onceq_queue_paused{namespace=%q,pod=%q,queue=%q}`, ns, pod, q), "0 1 stale"})
		}
		in = append(in,
			series{fmt.Sprintf(`onceq_queue_size{namespace="other",pod="x",queue=%q,state="pending"}`, q), "9999 9999 9999"},
			series{fmt.Sprintf(`onceq_queue_paused{namespace="other",pod="x",queue=%q}`, q), "0 0 0"})
		query, ok := queries[q]
		if !ok {
			continue // reported by the caller
		}
		exprs = append(exprs,
			exprTest{query, "0m", []sample{{"{}", float64(pending)}}},
			exprTest{query, "1m", []sample{{"{}", 0}}},
			exprTest{query, "2m", nil})
	}
	file := map[string]any{
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"interval": "1m", "input_series": in, "promql_expr_test": exprs}},
	}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keda-queries.test.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules on the KEDA queries: %v\n%s", err, out)
	}
}
