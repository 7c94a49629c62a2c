// Package api is onceq's HTTP ingest API, served by `producer serve`:
//
//	POST /v1/payments            {"payment_id","account","amount","currency","description"?}
//	POST /v1/emails              {"to","subject","body","id"?}
//	POST /v1/scans               {"path","mode"?,"file_id"?}
//	POST /v1/webhooks/{source}   {"id","type","data"?,"attempt"?}
//	GET  /v1/jobs/{key}          key is "namespace/id", URL-escaped or not
//
// # Authentication
//
// Every route but the webhooks wants "Authorization: Bearer <token>" (the
// scheme in any case), compared in constant time against each configured
// token. Each token belongs to a client, the principal: a named Client, or
// for a bare token the id DerivedPrincipal gives it. A client may have
// several tokens (rotation). With no token configured, which config allows
// on loopback only, those routes are open and every caller is Anonymous.
// Every 401 carries WWW-Authenticate.
//
// A webhook authenticates with an HMAC-SHA256 signature of its source's
// secret, in the Stripe style:
//
//	Onceq-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// Several v1 entries may be given, and a source may have several secrets
// (while a sender rotates); one match is enough. A timestamp further than the tolerance from the
// server's clock is refused, so a captured request cannot be replayed later.
// A missing, malformed, forged or stale signature is a 401 and nothing is
// enqueued; an unknown source is a 404. With openssl:
//
//	t=$(date +%s)
//	sig=$(printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)
//	curl -H "Onceq-Signature: t=$t,v1=$sig" ...
//
// # Idempotency
//
// Every POST honours an Idempotency-Key (or X-Idempotency-Key) header with
// the semantics of the IETF httpapi Idempotency-Key draft, as Stripe does:
// the first request with a key runs and, when it succeeds (2xx), its response
// is stored; a retry with the same key and the same request gets that
// response back byte for byte with "Idempotent-Replayed: true"; a retry
// while the first is still in flight is a 409; the same key with another
// request is a 422. "The same request" is compared on the decoded body, so
// key order and spacing do not matter. Responses that a retry may change
// (429, 5xx) are not stored and leave nothing behind: the retry runs at
// once, with the same or a corrected body. A claim whose Redis reply was
// lost is cleared by the next retry reaching the same process (elsewhere it
// lasts the short API lease). Keys are scoped per client and route (and per
// webhook source), at most 255 bytes, without control characters. Webhooks
// require a key; elsewhere it is optional, and the producer's own
// deduplication (a payment's payment_id, a content hash) applies with or
// without it.
//
// A payment's job is keyed by its payment_id whatever the header says (a
// global key: another client sending it gets a bare "duplicate", nothing of
// the job); an email without an "id" takes "<client>:<header>" as its id; a
// webhook event's job is keyed by "<source>:<Idempotency-Key>", so two
// senders cannot collide. GET /v1/jobs shows a job only to the client that
// enqueued it; to anyone else it is a 404.
//
// # Responses
//
//	202 {"decision":"enqueued","key","task_id","queue","state"}
//	200 {"decision":"duplicate","key","task_id","state","result","reason"}
//	429 problem, Retry-After: the producer's rate rule refused the job
//
// Errors are RFC 9457 problem documents (application/problem+json) with
// type, title, status and detail: 400 malformed JSON, duplicate or
// case-variant member names, unknown fields, trailing data, wrong types or a
// bad Idempotency-Key; 401 no or bad credentials; 404 unknown route, webhook
// source or job; 405 (with Allow) a known path with another method; 409 the
// same key is in flight; 413 body over the limit; 415 not application/json;
// 422 a payload that decodes but is invalid, or a key reused with another
// body; 503 Redis unreachable or slow (with Retry-After), never a hang: every
// request's Redis work is bounded by a time-out. A 503 after the enqueue was
// sent says the outcome is unknown: retry with the same key. Wrap the
// server's handler in Problems and its listener in Listener, and the errors
// other handlers and net/http itself write (400, 431, 501) are problems too.
package api
