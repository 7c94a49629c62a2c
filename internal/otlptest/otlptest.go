// Package otlptest is an OpenTelemetry collector stand-in for tests: an
// HTTP server on loopback that receives traces as OTLP/HTTP protobuf, the
// way a collector's otlp receiver does, and keeps their spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its ids in hex.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	Kind     string // SPAN_KIND_SERVER, SPAN_KIND_PRODUCER, ...
	Attrs    map[string]string
	Links    []Link
	Error    bool // status code error
}

// Link is one link of a span.
type Link struct {
	TraceID, SpanID string
	Attrs           map[string]string
}

// Collector receives spans on URL + "/v1/traces".
type Collector struct {
	URL string

	mu    sync.Mutex
	spans []Span
	bad   error
}

// Start runs a Collector until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	srv := httptest.NewServer(http.HandlerFunc(c.receive))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Env is the OTEL_* environment that sends a process's traces here, and
// promptly (50 ms batches).
func (c *Collector) Env() map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": c.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
}

func (c *Collector) receive(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.fail(fmt.Errorf("unexpected %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
		http.Error(w, "OTLP/HTTP protobuf traces only", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			c.fail(err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		c.fail(err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Kind: s.GetKind().String(), Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR"}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()),
						SpanID: hex.EncodeToString(l.GetSpanId()), Attrs: attrs(l.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bad == nil {
		c.bad = err
	}
}

// attrs renders OTLP attributes as strings (an int as its decimal).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// Spans returns what arrived so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Wait polls until done says the spans so far are enough, and fails the
// test after 30s, or at once when the collector received something it
// could not read.
func (c *Collector) Wait(t testing.TB, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		bad := c.bad
		c.mu.Unlock()
		if bad != nil {
			t.Fatalf("collector: %v", bad)
		}
		spans := c.Spans()
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector: the spans awaited did not arrive within 30s; got:\n%s", Describe(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Describe lists spans one a line, for failure messages.
func Describe(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %q %s trace=%s span=%s parent=%s attrs=%v links=%v\n",
			s.Service, s.Name, s.Kind, s.TraceID, s.SpanID, s.ParentID, s.Attrs, s.Links)
	}
	return b.String()
}
