// Package linearize checks that onceq's idempotency record behaves like one
// atomic object: it records every Claim, Extend, Complete, Release and
// Status that concurrent clients make on a storage.Store, with call and return
// times and outcomes (History, Client), and asks porcupine whether some
// order of them, each taking effect between its call and its return, obeys a
// sequential specification of the record (Model, Check).
//
// # The specification
//
// One record per key (porcupine checks keys separately): absent, running
// (owner, fencing token, lease), done (result) or failed (cause), with the
// rules of doc.go at the module root and the Lua scripts: done answers Conflict to
// another fingerprint and Duplicate to the same, a live lease InProgress
// with its owner and end (whatever the fingerprint), anything else is
// acquired, storing the claim's fingerprint, with attempt+1 and a token above every
// earlier one and at or above the claiming worker's clock in µs at the call
// (the clients run in the recording process, so that is the history's
// clock); Extend, Complete and Release succeed exactly for the current
// token, whatever the lease; Status reports state, fingerprint, attempts,
// token, owner, result, cause and lease end. Only a failed record has a
// cause: a claim drops the last Release's, as the packed record keeps none
// while running. Rules.Reentrant adds the re-entrant claim of one delivery.
//
// # Unknown outcomes
//
// A call that timed out or lost its connection may or may not have run, at
// any moment after its call: it is recorded with an infinite return and the
// model lets it be a no-op or take effect. What nobody saw stays a range: a
// lost claim's token is "some token above the last one", which no client
// holds, and its lease ends somewhere in [call+lease, ∞); a later read or
// InProgress pins them down.
//
// # Time
//
// Leases make the record depend on Redis's clock. The model includes that
// clock instead of assuming leases never end: a command runs at some Redis
// time within its call and return, and the histories are timed on the same
// host's wall clock that Redis reads (Slack covers units and reading
// order). A lease ends at Redis's now + lease (its PTTL less the grace), and
// what the store reports of it is an estimate on the worker's clock taken
// after the reply: an acquired claim's lease end is that clock plus the
// lease, so Redis granted it no later than LeaseUntil - lease; InProgress
// and Status add the PTTL Redis read to that clock, so they report the
// lease end late by at most the call's duration. The model keeps each lease
// end as the range these reports allow, so a takeover is legal only if the
// old lease could have ended by the time it ran, InProgress only if the
// lease could still run during the call, and every report of one lease must
// fit one end. Record TTLs (lease + FailedTTL, DoneTTL) are not
// modelled: the harness keeps them at hours, far beyond a history, so a
// record never expires mid-history. Forget and the producer windows are
// outside the model.
//
// # When it fails
//
// Check returns porcupine's verdict and, for a violation, a minimal history
// of one key (Result.Report, one line per operation) and the interactive
// HTML view of the whole and the minimal history (Result.WriteHTML).
//
// The package's tests run histories against a real redis-server with AOF,
// clients behind a proxy that cuts and delays their connections, Redis
// killed and restarted mid-history, and clients paused past their lease.
// The real store is held to Rules.Reentrant: each client claims as a
// delivery (Store.Claim's delivery), one in flight at a time (a delivery in
// flight twice can take the key from itself forever, see claim.pml), comes
// back as that delivery after a failed call, and now and then claims again
// at once as if a reply were lost. They also run a deliberately broken store
// through the same harness to show the check fails when it should. Longer runs, and clients that retry as
// go-redis does by default (a retried script is a second operation inside
// one call, so expect violations):
//
//	go test -count=1 -run TestRedisStore ./internal/linearize/ -args -histories=50 -history=10s
//	go test -count=1 -run TestRedisStore ./internal/linearize/ -args -client-retries=3
//
// claim.pml is the claim protocol in Promela; TestSpinModel has spin check
// that no two completions are accepted and that the job is eventually done.
package linearize
