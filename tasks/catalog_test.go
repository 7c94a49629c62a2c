package tasks_test

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
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
	typed := mustJob(t)(testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: "p-1", Account: "a", Amount: 5, Currency: "EUR"})))
	fromJSON := mustJob(t)(c.Build(tasks.TypePayment, []byte(`{ "currency":"EUR","amount":5, "account":"a","payment_id":"p-1"}`), "hdr", ""))
	if typed.Key != fromJSON.Key || typed.Fingerprint != fromJSON.Fingerprint || len(fromJSON.Rules) != 1 {
		t.Fatalf("typed %v %s, JSON %v %s", typed.Key, typed.Fingerprint, fromJSON.Key, fromJSON.Fingerprint)
	}
	// A webhook's key is its signed source and event id; a header never replaces it.
	wh := []byte(`{"source":"acme","event_id":"evt_1","type":"user.created","data":{"user_id":"u1","email":"a@example.com"}}`)
	if j := mustJob(t)(c.Build(tasks.TypeWebhook, wh, "delivery-7", "")); j.Key.String() != "webhook:process/acme:evt_1" {
		t.Fatalf("webhook key %v", j.Key)
	}
	if _, err := c.Build("fax:send", []byte(`{}`), "", ""); !errors.Is(err, dedup.ErrInvalid) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := c.Build(tasks.TypeEmail, []byte(`{"to":`), "", ""); !errors.Is(err, dedup.ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
}

// What a handler would archive as invalid, and can be told from the payload
// alone, is refused by Build: a producer hears it at once, and the key stays
// free for the corrected job.
func TestCatalogBuildRefusesWhatHandlersRefuse(t *testing.T) {
	t.Parallel()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	event := func(typ, data string) string {
		if data == "" {
			return `{"source":"acme","event_id":"evt_1","type":"` + typ + `"}`
		}
		return `{"source":"acme","event_id":"evt_1","type":"` + typ + `","data":` + data + `}`
	}
	for _, tc := range []struct {
		name, typ, payload string
		ok                 bool
	}{
		{"user.created", tasks.TypeWebhook, event("user.created", `{"user_id":"u1","email":"a@example.com","extra":1}`), true},
		{"user.created without user_id", tasks.TypeWebhook, event("user.created", `{"email":"a@example.com"}`), true},
		{"user.created with empty user_id", tasks.TypeWebhook, event("user.created", `{"user_id":"","email":"a@example.com"}`), true},
		{"user.created without email", tasks.TypeWebhook, event("user.created", `{"user_id":"u1"}`), true},
		{"user.created with a bad email", tasks.TypeWebhook, event("user.created", `{"user_id":"u1","email":"not an address"}`), true},
		{"user.created with two emails", tasks.TypeWebhook, event("user.created", `{"user_id":"u1","email":"a@example.com, b@example.com"}`), true},
		{"user.created with a name that breaks the subject", tasks.TypeWebhook,
			event("user.created", `{"user_id":"u1","email":"a@example.com","name":"A\nBcc: e@example.com"}`), true}, // processed, no email
		{"user.created with user_id a number", tasks.TypeWebhook, event("user.created", `{"user_id":1,"email":"a@example.com"}`), false},
		{"user.created without data", tasks.TypeWebhook, event("user.created", ""), true},
		{"user.created with null data", tasks.TypeWebhook, event("user.created", `null`), true},
		{"user.created with string data", tasks.TypeWebhook, event("user.created", `"u1"`), false},
		{"unknown event type without data", tasks.TypeWebhook, event("invoice.paid", ""), true},
		{"unknown event type with other data", tasks.TypeWebhook, event("invoice.paid", `[1]`), true},
		{"email", tasks.TypeEmail, `{"to":"a@example.com","subject":"s","body":""}`, true},
		{"email without subject and body", tasks.TypeEmail, `{"to":"a@example.com","subject":"","body":""}`, false},
		{"email without subject and body fields", tasks.TypeEmail, `{"to":"a@example.com"}`, false},
		{"email to a bad address", tasks.TypeEmail, `{"to":"a@","subject":"s","body":"b"}`, false},
		{"sms without body", tasks.TypeSMS, `{"to":"+4915112345678","body":""}`, false},
		{"sms to a non-E.164 number", tasks.TypeSMS, `{"to":"015112345678","body":"b"}`, false},
		{"payment of zero", tasks.TypePayment, `{"payment_id":"p","account":"a","amount":0,"currency":"EUR"}`, false},
		{"payment in a bad currency", tasks.TypePayment, `{"payment_id":"p","account":"a","amount":1,"currency":"eur"}`, false},
		{"scan of a missing file", tasks.TypeScan, `{"path":"not/on/this/machine"}`, true},
		{"scan with traversal", tasks.TypeScan, `{"path":"a/../../b"}`, false},
		{"scan in an unknown mode", tasks.TypeScan, `{"path":"a","mode":"quick"}`, false},
		{"order without lines", tasks.TypeOrder, `{"order_id":"o","customer":"c","lines":[]}`, false},
		{"order of zero", tasks.TypeOrder, `{"order_id":"o","customer":"c","lines":[{"sku":"s","qty":0}]}`, false},
	} {
		_, err := c.Build(tc.typ, []byte(tc.payload), "", "")
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: Build = %v, want a job", tc.name, err)
		case !tc.ok && !errors.Is(err, dedup.ErrInvalid):
			t.Errorf("%s: Build = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestCatalogKinds(t *testing.T) {
	t.Parallel()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := tasks.NewCatalog(tasks.Windows{KeepCompleted: true})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, k := range c.Kinds() {
		types = append(types, k.Type)
		if k.WriteResult { // the dashboard's copy is opt-in (ONCEQ_KEEP_COMPLETED)
			t.Errorf("%s keeps its completed tasks by default", k.Type)
		}
		if !kept.Kinds()[i].WriteResult { // else asynqmon shows "non-printable bytes" for it
			t.Errorf("%s does not write its result for the dashboard when kept", k.Type)
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
	if _, err := tasks.NewCatalog(tasks.Windows{}, tasks.Emails.Kind, tasks.Emails.Kind); err == nil {
		t.Fatal("a type defined twice was accepted")
	}
	if _, err := tasks.NewCatalog(tasks.Windows{}, &dedup.Kind{Type: "hand:made"}); err == nil {
		t.Fatal("a Kind not made by Define was accepted")
	}
	if _, err := tasks.NewCatalog(tasks.Windows{PaymentRate: -1}); err == nil {
		t.Fatal("a negative window was accepted")
	}
}

// A worker serving some queues runs the types on them; one serving none of
// the catalog's queues is refused.
func TestCatalogOn(t *testing.T) {
	t.Parallel()
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		t.Fatal(err)
	}
	critical, err := c.On(map[string]int{tasks.QueueCritical: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range critical.Kinds() {
		if k.Queue != tasks.QueueCritical {
			t.Errorf("%s on %s among the critical queue's types", k.Type, k.Queue)
		}
	}
	if len(critical.Kinds()) == 0 || len(critical.Kinds()) == len(c.Kinds()) {
		t.Errorf("%d of %d types on the critical queue", len(critical.Kinds()), len(c.Kinds()))
	}
	if _, err := c.On(map[string]int{"nowhere": 1}); err == nil {
		t.Error("a worker serving no catalog queue was accepted")
	}
}
