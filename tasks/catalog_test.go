package tasks_test

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/tasks"
)

// Every way in builds through Catalog.Build: the same payload gives the same
// key and fingerprint whether it came from the CLI's struct, a batch line or
// an HTTP body with another key order and spacing.
func TestCatalogBuildAgrees(t *testing.T) {
	t.Parallel()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	typed := mustJob(t)(tasks.NewPayment(tasks.Payment{PaymentID: "p-1", Account: "a", Amount: 5, Currency: "EUR"}))
	fromJSON := mustJob(t)(c.Build(tasks.TypePayment, []byte(`{ "currency":"EUR","amount":5, "account":"a","payment_id":"p-1"}`), "hdr"))
	if typed.Key != fromJSON.Key || typed.Fingerprint != fromJSON.Fingerprint || len(fromJSON.Rules) != 1 {
		t.Fatalf("typed %v %s, JSON %v %s", typed.Key, typed.Fingerprint, fromJSON.Key, fromJSON.Fingerprint)
	}
	// A webhook's key is its signed source and event id; a header never replaces it.
	wh := []byte(`{"source":"acme","event_id":"evt_1","type":"user.created"}`)
	if j := mustJob(t)(c.Build(tasks.TypeWebhook, wh, "delivery-7")); j.Key.String() != "webhook:process/acme:evt_1" {
		t.Fatalf("webhook key %v", j.Key)
	}
	if _, err := c.Build("fax:send", []byte(`{}`), ""); !errors.Is(err, tasks.ErrInvalid) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := c.Build(tasks.TypeEmail, []byte(`{"to":`), ""); !errors.Is(err, tasks.ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
}

func TestCatalogKinds(t *testing.T) {
	t.Parallel()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, k := range c.Kinds() {
		types = append(types, k.Type)
		if k.KeyRule == "" {
			t.Errorf("%s has no documented key rule", k.Type)
		}
	}
	want := []string{"email:send", "order:fulfil", "payment:charge", "scan:file", "sms:send", "webhook:process"}
	if len(types) != len(want) {
		t.Fatalf("kinds %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("kinds %v, want %v", types, want)
		}
	}
	if _, err := tasks.NewCatalog(tasks.Windows{}, tasks.Emails.Kind(), tasks.Emails.Kind()); err == nil {
		t.Fatal("a type defined twice was accepted")
	}
	if _, err := tasks.NewCatalog(tasks.Windows{}, &tasks.Kind{Type: "hand:made"}); err == nil {
		t.Fatal("a Kind not made by Define was accepted")
	}
	if _, err := tasks.NewCatalog(tasks.Windows{PaymentRate: -1}); err == nil {
		t.Fatal("a negative window was accepted")
	}
}
