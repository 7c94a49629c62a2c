package admin_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/internal/admin"
)

// A scraper that asks for OpenMetrics gets the exemplars; one that does
// not gets the text format, as before.
func TestMetricsExemplars(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "run_seconds", Help: "h"})
	reg.MustRegister(h)
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(0.2, prometheus.Labels{"trace_id": "0102"})
	base := serve(t, admin.Options{Gatherer: reg})
	_, body := do(t, "GET", base+"/metrics", map[string]string{"Accept": "application/openmetrics-text;version=1.0.0"})
	if !strings.Contains(body, `# {trace_id="0102"}`) {
		t.Errorf("OpenMetrics scrape without the exemplar:\n%s", body)
	}
	resp, body := do(t, "GET", base+"/metrics", nil)
	if strings.Contains(body, "trace_id") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("plain scrape: %s\n%s", resp.Header.Get("Content-Type"), body)
	}
}
