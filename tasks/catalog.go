package tasks

import (
	"fmt"

	"github.com/go-json-experiment/json"
)

// Decode strictly decodes one JSON payload into v: invalid UTF-8, duplicate
// member names, names that match a field only in another case, unknown
// fields, trailing data and wrong types are errors wrapping ErrInvalid. With
// last-one-wins or case folding, `"amount":1,"Amount":9` would charge 9
// while a reviewer of the body reads 1. The JSON v2 decoder has these modes
// by default; we only add the rejection of unknown members.
func Decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v, json.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// JobFor builds the Job for a task type from its JSON payload, through the
// type's own constructor, so policies are the same however a job arrives
// (CLI, batch file, HTTP). explicit is an Idempotency-Key, where the type
// takes one.
func JobFor(typ string, payload []byte, explicit string) (Job, error) {
	switch typ {
	case TypeEmail:
		var e Email
		if err := Decode(payload, &e); err != nil {
			return Job{}, err
		}
		if explicit != "" {
			e.ID = explicit
		}
		return NewEmail(e)
	case TypeScan:
		var s Scan
		if err := Decode(payload, &s); err != nil {
			return Job{}, err
		}
		if explicit != "" {
			return Job{}, fmt.Errorf("%w: %s keys are content hashes; drop the idempotency key", ErrInvalid, TypeScan)
		}
		return NewScan(s)
	case TypePayment:
		var p Payment
		if err := Decode(payload, &p); err != nil {
			return Job{}, err
		}
		if explicit != "" && explicit != p.PaymentID {
			return Job{}, fmt.Errorf("%w: a payment's idempotency key is its payment_id", ErrInvalid)
		}
		return NewPayment(p)
	case TypeWebhook:
		var w Webhook
		if err := Decode(payload, &w); err != nil {
			return Job{}, err
		}
		return NewWebhook(w, explicit)
	case TypeOrder:
		var o Order
		if err := Decode(payload, &o); err != nil {
			return Job{}, err
		}
		if explicit != "" && explicit != o.OrderID {
			return Job{}, fmt.Errorf("%w: an order's idempotency key is its order_id", ErrInvalid)
		}
		return NewOrder(o)
	}
	return Job{}, fmt.Errorf("%w: unknown task type %q", ErrInvalid, typ)
}
