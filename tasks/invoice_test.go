package tasks_test

// Invoice is a payload of a type of the test's own, beside the built-in ones.
type Invoice struct {
	InvoiceID string `json:"invoice_id"`
	Amount    int64  `json:"amount"`
	TraceID   string `json:"trace_id,omitempty" dedup:"volatile"` // not part of the fingerprint
}
