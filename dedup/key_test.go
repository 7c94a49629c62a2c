package dedup_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ns, id string
		ok     bool
	}{
		{"email:send", "welcome-1", true},
		{"payment:charge", "pmt-20260628-001", true},
		{"webhook:process", "stripe:evt_1/with/slashes", true},
		{"", "x", false},
		{"ns", "", false},
		{"ns", "a{b", false},
		{"ns", "a}b", false},
		{"n{s", "x", false},
		{"n/s", "x", false},
		{"ns", "with space", false},
		{"ns", "tab\there", false},
		{"ns", "nul\x00", false},
		{"ns", "bad\xffutf8", false},
		{"ns", strings.Repeat("x", dedup.MaxIDLen), true},
		{"ns", strings.Repeat("x", dedup.MaxIDLen+1), false},
	}
	for _, tt := range tests {
		k, err := dedup.NewKey(tt.ns, tt.id)
		if tt.ok != (err == nil) {
			t.Errorf("NewKey(%q, %q) error %v, want ok=%v", tt.ns, tt.id, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, dedup.ErrInvalidKey) {
				t.Errorf("NewKey(%q, %q) error %v does not wrap ErrInvalidKey", tt.ns, tt.id, err)
			}
			continue
		}
		back, err := dedup.ParseKey(k.String())
		if err != nil || back != k {
			t.Errorf("ParseKey(%q) = %v, %v", k.String(), back, err)
		}
	}
}

func TestDerive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, payload, explicit, wantID string
	}{
		{"explicit wins", `{"id":"p","dedup_key":"d"}`, "hdr-1", "hdr-1"},
		{"dedup_key before id", `{"id":"p","dedup_key":"d"}`, "", "d"},
		{"string id", `{"id":"evt_1"}`, "", "evt_1"},
		{"integer id", `{"id":42}`, "", "42"},
		{"no id: hash", `{"to":"a"}`, "", "hash"},
		{"fractional id: hash", `{"id":4.5}`, "", "hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, fp, err := dedup.Derive("ns", []byte(tt.payload), tt.explicit, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The fingerprint is base64url; a content id is HashMark and the
			// hex spelling of the same SHA-256.
			idOK := k.ID == tt.wantID
			if tt.wantID == "hash" {
				sum, err := base64.RawURLEncoding.DecodeString(fp)
				idOK = err == nil && k.ID == "~"+hex.EncodeToString(sum)
			}
			if !idOK || k.Namespace != "ns" || len(fp) != 43 {
				t.Fatalf("Derive = %v, fp %q; want id %q", k, fp, tt.wantID)
			}
		})
	}
	if k, _, err := dedup.Derive("ns", []byte(`{"id":"a{b}"}`), "", nil); err != nil || !strings.HasPrefix(k.ID, "~k") {
		t.Fatalf("id with braces: %v %v, want a hashed caller id", k, err)
	}
	if _, _, err := dedup.Derive("ns", []byte(`{"a":`), "", nil); !errors.Is(err, dedup.ErrBadPayload) {
		t.Fatalf("truncated payload: %v, want ErrBadPayload", err)
	}
}

func TestVolatileFields(t *testing.T) {
	t.Parallel()
	type meta struct {
		TraceID string `json:"trace_id" dedup:"volatile"`
		Tenant  string `json:"tenant"`
	}
	type payload struct {
		To      string `json:"to"`
		Attempt int    `json:"attempt,omitempty" dedup:"volatile"`
		Meta    *meta  `json:"meta"`
		Skip    string `json:"-" dedup:"volatile"`
	}
	got := dedup.VolatileFields(&payload{})
	if strings.Join(got, ",") != "attempt,meta.trace_id" {
		t.Fatalf("VolatileFields = %v", got)
	}
}

func TestKeyContext(t *testing.T) {
	t.Parallel()
	if _, ok := dedup.KeyFromContext(context.Background()); ok {
		t.Fatal("empty context has a key")
	}
	k := dedup.Key{Namespace: "a", ID: "b"}
	if got, ok := dedup.KeyFromContext(dedup.WithKey(context.Background(), k)); !ok || got != k {
		t.Fatalf("KeyFromContext = %v %v", got, ok)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"email:send/welcome-1", "a/b/c", "/x", "x/", "n{s}/id", "ns/\x00", "ns/" + strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := dedup.ParseKey(s)
		if err != nil {
			if !errors.Is(err, dedup.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		// A valid key never carries a hash-tag brace and round-trips.
		if strings.ContainsAny(k.Namespace+k.ID, "{}") || k.String() != s {
			t.Fatalf("ParseKey(%q) = %#v", s, k)
		}
	})
}

// No key a caller chooses can land on another job's content hash, nor on
// the hash of another caller key.
func TestHashedKeysHaveTheirOwnSpace(t *testing.T) {
	t.Parallel()
	hashed, fp, err := dedup.Derive("ns", []byte(`{"to":"a"}`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	spaced, _, err := dedup.Derive("ns", []byte(`{"to":"b"}`), "key with spaces", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{fp, hashed.ID, "sha256-" + fp, spaced.ID} {
		k, _, err := dedup.Derive("ns", []byte(`{"to":"c"}`), caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		if k == hashed || k == spaced {
			t.Errorf("caller key %q maps to %v, another job's key", caller, k)
		}
	}
	if again, _ := dedup.CallerID("ns", hashed.ID); again == hashed.ID {
		t.Errorf("CallerID(%q) kept a hash-marked id", hashed.ID)
	}
}
