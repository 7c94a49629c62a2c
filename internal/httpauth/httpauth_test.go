package httpauth

import (
	"net/http/httptest"
	"testing"
)

func TestBearer(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{
		"Bearer tok": "tok", "bearer tok": "tok", "BEARER  tok": "tok", "Bearer a b": "a b",
		"": "", "Bearer": "", "Bearer ": "", "Basic dXNlcjpwdw==": "", "Bearertok": "", "tok": "",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		got, ok := Bearer(r)
		if got != want || ok != (want != "") {
			t.Errorf("Bearer(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
}
