package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/tasks"
)

// The OpenAPI document is valid OpenAPI 3.1, names the routes the
// daemon's catalog serves and the members of its payload and answer
// types, and every answer of a live server to the requests a client
// sends (each status the document lists for the ingest routes, webhooks
// and job reads) passes the document's request and response validation.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPIMajorMinor() != "3.1" {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}

	// Routes: one POST /v1/<route> per catalog type with a route.
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, k := range c.Kinds() {
		if r := c.Route(k.Type); r != "" {
			want = append(want, "/v1/"+r)
		}
	}
	for path, item := range doc.Paths.Map() {
		if item.Post != nil && path != "/v1/webhooks/{source}" {
			got = append(got, path)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("ingest routes in the document %v, the catalog serves %v", got, want)
	}

	// Schemas: the members of the Go types, no more, no fewer.
	for name, v := range map[string]any{"Email": tasks.Email{}, "SMS": tasks.SMS{}, "Payment": tasks.Payment{}, "Scan": tasks.Scan{},
		"Order": tasks.Order{}, "Accepted": api.Accepted{}, "Job": dedup.JobStatus{}, "Problem": api.Problem{}} {
		s := doc.Components.Schemas[name]
		if s == nil {
			t.Errorf("no schema %s", name)
			continue
		}
		var props []string
		for p := range s.Value.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		if names := jsonNames(reflect.TypeOf(v)); !slices.Equal(props, names) {
			t.Errorf("schema %s has %v; the Go type %T has %v", name, props, v, names)
		}
	}

	// The live server's answers.
	e := newEnv(t, func(o *api.Options) {
		o.Clients = append(o.Clients, api.Client{Name: "ops", Token: opsToken, Operator: true})
	})
	doc.Servers = openapi3.Servers{{URL: e.srv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	check := func(r req, status int) []byte {
		t.Helper()
		method := r.method
		if method == "" {
			method = http.MethodPost
		}
		hreq, err := http.NewRequest(method, e.srv.URL+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Authorization", "Bearer "+token)
		for k, v := range r.header {
			if v == "" {
				hreq.Header.Del(k)
			} else {
				hreq.Header.Set(k, v)
			}
		}
		route, params, err := router.FindRoute(hreq)
		if err != nil {
			t.Fatalf("%s %s: not in the document: %v", method, r.path, err)
		}
		in := &openapi3filter.RequestValidationInput{Request: hreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if status < 400 { // a request refused on purpose need not match its schema
			if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
				t.Errorf("%s %s: request: %v", method, r.path, err)
			}
			hreq.Body = io.NopCloser(strings.NewReader(r.body))
		}
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != status {
			t.Errorf("%s %s: %d %s, want %d", method, r.path, resp.StatusCode, body, status)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Errorf("%s %s: %d response does not match the document: %v\n%s", method, r.path, resp.StatusCode, err, body)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			var p api.Problem
			if err := json.Unmarshal(body, &p); err != nil || !strings.Contains(string(api.OpenAPI), strings.TrimPrefix(p.Type, api.ProblemType)) {
				t.Errorf("problem type %q is not listed in the document (%v)", p.Type, err)
			}
		}
		return body
	}

	pay := paymentBody("pmt-oas-1", "acct-oas", 4200)
	key := map[string]string{"Idempotency-Key": `"oas-1"`}
	check(req{path: paymentPath, body: pay, header: key}, http.StatusAccepted)
	check(req{path: paymentPath, body: pay, header: key}, http.StatusAccepted) // replayed
	check(req{path: paymentPath, body: pay}, http.StatusOK)                    // duplicate
	check(req{path: paymentPath, body: paymentBody("pmt-oas-1", "acct-oas", 9900)}, http.StatusUnprocessableEntity)
	check(req{path: paymentPath, body: paymentBody("pmt-oas-2", "acct-oas", 4200)}, http.StatusTooManyRequests)
	check(req{path: paymentPath, body: paymentBody("pmt-oas-3", "acct-oas", 4300), header: key}, http.StatusUnprocessableEntity)
	check(req{path: paymentPath, body: `{"payment_id":"p"}`}, http.StatusBadRequest)
	check(req{path: paymentPath, body: pay, header: map[string]string{"Authorization": ""}}, http.StatusUnauthorized)
	check(req{path: paymentPath, body: pay, header: map[string]string{"Content-Type": "text/plain"}}, http.StatusUnsupportedMediaType)
	check(req{path: paymentPath, body: `{"payment_id":"` + strings.Repeat("x", 5<<10) + `"}`}, http.StatusRequestEntityTooLarge)
	check(req{path: emailPath, body: `{"to":"ada@example.com","subject":"Hi","body":"."}`}, http.StatusAccepted)
	check(req{path: "/v1/orders", body: `{"order_id":"ord-oas","customer":"c-1","lines":[{"sku":"s-1","qty":2}]}`}, http.StatusAccepted)
	check(req{path: "/v1/sms", body: `{"to":"+4915112345678","body":"Your code is 4711"}`}, http.StatusAccepted)
	check(req{path: scanPath, body: `{"path":"uploads/a.pdf","mode":"full","file_id":"f-1"}`}, http.StatusAccepted)
	check(req{path: scanPath, body: `{"path":"uploads/b.pdf","file_id":"f-1"}`}, http.StatusTooManyRequests)

	k, err := dedup.NewKey(tasks.TypePayment, "pmt-oas-1")
	if err != nil {
		t.Fatal(err)
	}
	check(req{method: http.MethodGet, path: "/v1/jobs/" + k.TaskID()}, http.StatusOK)
	check(req{method: http.MethodGet, path: "/v1/jobs/payment:charge=nope"}, http.StatusNotFound)
	check(req{method: http.MethodGet, path: "/v1/jobs/payment:charge%2Fpmt-oas-1/history"}, http.StatusOK)
	check(req{method: http.MethodGet, path: "/v1/jobs/payment:charge%2Fnope/history"}, http.StatusNotFound)
	check(req{method: http.MethodGet, path: "/openapi.json"}, http.StatusOK)

	// Resets: only an operator's; a running job is a 409 unless let finish.
	ops := map[string]string{"Authorization": "Bearer " + opsToken}
	jobPath := "/v1/jobs/" + url.PathEscape(k.String())
	check(req{method: http.MethodDelete, path: jobPath}, http.StatusForbidden)
	check(req{method: http.MethodDelete, path: jobPath, header: map[string]string{"Authorization": ""}}, http.StatusUnauthorized)
	check(req{method: http.MethodDelete, path: "/v1/jobs/no-slash", header: ops}, http.StatusBadRequest)
	cl, err := e.jobs.Claim(ctx, k, "", time.Minute, "")
	if err != nil || cl.Outcome != dedup.Acquired {
		t.Fatalf("claim %+v %v", cl, err)
	}
	check(req{method: http.MethodDelete, path: jobPath, header: ops}, http.StatusConflict)
	check(req{method: http.MethodDelete, path: jobPath + "?running=finish", header: ops}, http.StatusOK)
	check(req{method: http.MethodDelete, path: jobPath, header: ops}, http.StatusNotFound)

	seed := `{"id":"evt_oas","event":"user.created","data":{"name":"Alice"}}`
	signed := func(body string) map[string]string {
		return map[string]string{"Authorization": "", api.SignatureHeader: testenv.Sign(secret, e.clock(), []byte(body)), "X-Idempotency-Key": "wh-oas"}
	}
	check(req{path: "/v1/webhooks/" + source, body: seed, header: signed(seed)}, http.StatusAccepted)
	h := signed(seed)
	h["X-Idempotency-Key"] = ""
	check(req{path: "/v1/webhooks/" + source, body: seed, header: h}, http.StatusOK)
	h[api.SignatureHeader] = "t=1,v1=00"
	check(req{path: "/v1/webhooks/" + source, body: seed, header: h}, http.StatusUnauthorized)
	check(req{path: "/v1/webhooks/nobody", body: seed, header: signed(seed)}, http.StatusUnauthorized)
	check(req{path: "/v1/webhooks/" + source, body: `{"id":"evt_x","type":"user.created","data":{"email":7}}`,
		header: signed(`{"id":"evt_x","type":"user.created","data":{"email":7}}`)}, http.StatusBadRequest)
}

// jsonNames are the sorted JSON member names of struct type t.
func jsonNames(t reflect.Type) []string {
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
