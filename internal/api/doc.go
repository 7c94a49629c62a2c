// Package api is onceq's HTTP ingest API, served by `producer serve`:
//
//	POST /v1/payments            {"payment_id","account","amount","currency","description"?}
//	POST /v1/emails              {"to","subject","body","id"?,"trace_id"?}
//	POST /v1/scans               {"path","mode"?,"file_id"?,"request_id"?}
//	POST /v1/sms                 {"to","body","id"?}
//	POST /v1/orders              {"order_id","customer","lines":[{"sku","qty"}]}
//	POST /v1/webhooks/{source}   any JSON object, signed by the source's Scheme
//	GET  /v1/jobs/{key}          key is "namespace/id", URL-escaped or not
//	GET  /openapi.json           the OpenAPI 3.1 document of these routes
//
// The POST /v1/<route> endpoints come from the task catalog
// (tasks.Catalog.Route); their bodies are the task payloads, built by tasks.Catalog.Build
// exactly as batch files and the CLI are.
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
// A webhook authenticates by its source's Scheme: SchemeStripe,
// SchemeGitHub and SchemeStandard as those senders sign, SchemeOnceq (the
// default) with an HMAC-SHA256 signature of its source's secret, in the
// Stripe style:
//
//	Onceq-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// Several v1 entries may be given, and a source may have several secrets
// (while a sender rotates); one match is enough. A timestamp further than the tolerance from the
// server's clock is refused, so a captured request cannot be replayed later.
// A missing, malformed, forged or stale signature is a 401 and nothing is
// enqueued; an unknown source gets the same 401, byte for byte, so an
// outsider can list neither the sources nor their senders (the log says
// which it was; only a stale signature, which takes the secret to make,
// is told as such). With openssl:
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
// webhook source), at most 255 bytes of printable ASCII (httpidem.Key). The key
// is optional everywhere, and the producer's own deduplication (a payment's
// payment_id, a webhook's signed event id, a content hash) applies with or
// without it.
//
// The header scopes replays of a request; whether it is also part of the job
// key is the task type's key rule. On a server with several clients, every
// job key an HTTP client makes lives in that client's scope,
// "<client>:<id>", with its rate rules (an email's or SMS's "id", its
// header, or its content hash), so no id a client types reaches another's
// job; the CLI and batch files act as an operator, outside every client's
// scope. With no tokens or one client there is no one to keep apart: the
// caller shares the CLI's scope (its keys and rules are the CLI's, and it
// reads every job). A type may declare its id Global (dedup.Spec): a
// payment's job is keyed by its payment_id whoever sends it (unless
// ONCEQ_PAYMENT_ID_SCOPE=client), and another client sending that id gets
// one answer whatever the content, 409 "payment-id-held" with nothing of
// the job. A webhook event's job is keyed by
// "<source>:<event id>", the id taken from the signed body (the "id" field,
// or the field ONCEQ_WEBHOOK_ID_FIELDS names for the source), so a captured
// body re-sent under a new header is a duplicate and two senders cannot
// collide. GET /v1/jobs shows a job only to the client that enqueued it, or
// to a read-all or operator client; to anyone else it is a 404.
// DELETE /v1/jobs resets a key (dedup.Producer.Reset) for an operator
// client, or the one caller of a shared scope, and is 403 for any other.
//
// A first request makes two Redis round trips before its answer: the
// claim, then the enqueue with its rate rules. The answer goes out while
// the replay record and the job's owner record are written (Handler.Drain
// waits for them at shutdown); this process reads its own writes (a retry
// is replayed from memory, GET /v1/jobs waits for the owner record), and
// another replica, for that one round trip, may answer a retry after a
// short wait and GET /v1/jobs with a 404.
//
// GET /openapi.json is the OpenAPI 3.1 document of these routes, their
// headers, payloads, answers and problem types (openapi.json), for client
// generators; TestOpenAPI checks it against a live server's answers.
//
// # Responses
//
//	202 {"decision":"enqueued","key","task_id","queue","state"}
//	200 {"decision":"duplicate","key","task_id","state","result","reason"}
//	422 problem "job-key-conflict": the job key was accepted before with other
//	    content (a payment id reused for another charge); nothing is enqueued
//	    and the other job's state and result are not disclosed
//	429 problem, Retry-After: the producer's rate rule refused the job
//
// Conflict is 422, not 409, following the IETF Idempotency-Key draft: 422 is
// "this key was used with another payload", which a reused business key is;
// 409 stays "the first request with this key is still in flight", which a
// retry may outlast. state is one of pending, scheduled, running, retry,
// done, failed, archived, unknown (dedup.Status), as in GET /v1/jobs.
//
// Errors are RFC 9457 problem documents (application/problem+json) with
// type, title, status and detail: 400 malformed JSON, duplicate or
// case-variant member names, unknown fields, trailing data, wrong types, a
// payload the catalog's Validate refuses, or an Idempotency-Key that is not
// an sf-string (see httpidem.Key); 401 no or bad credentials; 404 unknown route, webhook
// source or job; 405 (with Allow) a known path with another method; 409 the
// same key is in flight (Retry-After: what is left of its claim); 413 body over the limit; 415 not application/json;
// 422 a key reused with another body; 503 Redis unreachable or slow (with Retry-After), never a hang: every
// request's Redis work is bounded by a time-out. A 503 after the enqueue was
// sent says the outcome is unknown: retry with the same key. Wrap the
// server's handler in Problems and its listener in Listener, and the errors
// other handlers and net/http itself write (400, 431, 501) are problems too.
package api
