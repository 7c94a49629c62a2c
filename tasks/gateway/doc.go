// Package gateway speaks onceq's generic HTTP payment protocol from both
// sides: Client is the tasks.Gateway on any gateway that speaks it, and
// Server is the built-in gateway the embedded default serves.
//
// The protocol: POST /v1/charges with a JSON tasks.Payment and an
// Idempotency-Key; a 2xx answer names the charge by "id" or "charge_id" and
// carries Idempotent-Replayed: true when it repeats the first answer for the
// key; errors are application/problem+json. A key reused with another body
// is refused (422), so one key is one charge.
package gateway
