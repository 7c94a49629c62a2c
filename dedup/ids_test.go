package dedup_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

type billed struct {
	InvoiceID string `json:"invoice_id"`
	Amount    int64  `json:"amount"`
}

// A business id that cannot be the key's id as given (empty, too long, a
// space, a brace, a leading '~') is refused, not quietly swapped for a
// content hash or "~k" digest; with HashID it is hashed.
func TestBusinessIDUsedAsGivenOrRefused(t *testing.T) {
	t.Parallel()
	strict := dedup.Define(dedup.Spec[billed]{Type: "invoice:bill", ID: func(b billed) string { return b.InvoiceID }})
	hashing := dedup.Define(dedup.Spec[billed]{Type: "invoice:bill", ID: func(b billed) string { return b.InvoiceID }, HashID: true})
	for _, id := range []string{"", strings.Repeat("x", 256), "has space", "br{ace}", "~k0123"} {
		j := strict.Job(billed{InvoiceID: id, Amount: 1})
		if !errors.Is(j.Err, dedup.ErrInvalid) || !strings.Contains(j.Err.Error(), "HashID") {
			t.Errorf("id %.20q: %v, want ErrInvalid pointing at HashID", id, j.Err)
		}
		h := hashing.Job(billed{InvoiceID: id, Amount: 1})
		if h.Err != nil || !strings.HasPrefix(h.Key.ID, "~") {
			t.Errorf("id %.20q with HashID: %v %s, want a hashed key", id, h.Err, h.Key)
		}
	}
	if j := strict.Job(billed{InvoiceID: "inv-7", Amount: 1}); j.Err != nil || j.Key.ID != "inv-7" {
		t.Errorf("a usable id: %v %s, want it as given", j.Err, j.Key)
	}
}
