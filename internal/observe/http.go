package observe

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts and times the requests of the ingest API by route pattern
// ("POST /v1/payments") and status; 401s among them.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHTTP registers the API's request collectors with reg.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	h := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_http_requests_total",
			Help: "Requests the ingest API answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onceq_http_request_duration_seconds",
			Help:    "Time the ingest API took to answer, by route pattern and status code.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"route", "code"}),
	}
	reg.MustRegister(h.requests, h.duration)
	return h
}

// Zero starts route's series at zero for each of codes.
func (h *HTTP) Zero(route string, codes []int) {
	for _, c := range codes {
		h.requests.WithLabelValues(route, strconv.Itoa(c))
		h.duration.WithLabelValues(route, strconv.Itoa(c))
	}
}

// Observe counts one answered request.
func (h *HTTP) Observe(route string, code int, took time.Duration) {
	c := strconv.Itoa(code)
	h.requests.WithLabelValues(route, c).Inc()
	h.duration.WithLabelValues(route, c).Observe(took.Seconds())
}
