package tasks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// Decode strictly decodes one JSON payload into v: invalid UTF-8 (which
// encoding/json would silently replace), unknown fields, trailing data and
// wrong types are errors wrapping ErrInvalid.
func Decode(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON document", ErrInvalid)
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
	}
	return Job{}, fmt.Errorf("%w: unknown task type %q", ErrInvalid, typ)
}
