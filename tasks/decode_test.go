package tasks_test

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/strictjson"
	"github.com/onceq/onceq/tasks"
)

// Every way in (CLI, batch file, HTTP) decodes through Decode: a payload
// whose meaning depends on which of two names a parser keeps is refused.
func TestDecodeRefusesAmbiguousPayloads(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"duplicate name":    `{"payment_id":"p","account":"a","amount":1,"amount":2,"currency":"EUR"}`,
		"case variant":      `{"payment_id":"p","account":"a","amount":100,"Amount":5,"currency":"EUR"}`,
		"case only":         `{"payment_id":"p","account":"a","AMOUNT":100,"currency":"EUR"}`,
		"unknown member":    `{"payment_id":"p","account":"a","amount":1,"currency":"EUR","tip":1}`,
		"trailing data":     `{"payment_id":"p","account":"a","amount":1,"currency":"EUR"} {}`,
		"invalid UTF-8":     "{\"payment_id\":\"p\xff\",\"account\":\"a\",\"amount\":1,\"currency\":\"EUR\"}",
		"fractional amount": `{"payment_id":"p","account":"a","amount":1.5,"currency":"EUR"}`,
	} {
		t.Run(name, func(t *testing.T) {
			var p tasks.Payment
			if err := strictjson.Decode([]byte(in), &p); !errors.Is(err, dedup.ErrInvalid) {
				t.Fatalf("Decode(%s) = %v (amount %d), want ErrInvalid", in, err, p.Amount)
			}
			c, err := tasks.NewCatalog(tasks.Windows{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Build(tasks.TypePayment, []byte(in), "", ""); !errors.Is(err, dedup.ErrMalformed) {
				t.Fatalf("Build(%s) = %v, want ErrMalformed", in, err)
			}
		})
	}
	var p tasks.Payment
	if err := strictjson.Decode([]byte(`{"payment_id":"p","account":"a","amount":100,"currency":"EUR"}`), &p); err != nil || p.Amount != 100 {
		t.Fatalf("a plain payload: %v %+v", err, p)
	}
}
