// Package faulttest runs onceq's real binaries through faults and counts
// side effects where they land: a payment gateway that counts every POST per
// Idempotency-Key and every charge it creates, and an SMTP server
// that counts every message per Message-ID. The pass line of every scenario
// is the same: each accepted job's effect happens, and never twice.
//
// The scenarios (kill -9 mid-handler, SIGTERM and SIGHUP drains, a second
// SIGTERM forcing the exit, Redis restart with AOF, a network cut between a
// worker and Redis, a duplicate storm, a Sentinel failover and kill -9 of
// the master with and without ONCEQ_REDIS_MIN_REPLICAS, no key left
// stuck by kill -9, SIGSTOP and a Redis restart at once, and the Postgres
// outbox through kill -9 of the application and of a relay and restarts
// of Redis and Postgres; and, on a 3-master Redis Cluster as on one
// Redis, kill -9 with payments in flight over the masters, a done job's
// completed task deleted and the job resent, and no stuck key) take minutes,
// mostly waiting on asynq's own timers, so they run only with
// ONCEQ_FAULT_TESTS=1, all at once (TestMain raises -test.parallel unless it
// was given), each on its own redis-server or Cluster:
//
//	ONCEQ_FAULT_TESTS=1 go test -count=1 -v ./internal/faulttest/
//
// The worker and producer binaries are built once per run from the module
// root. Worker logs go to files under each test's temporary directory and are
// printed when the test fails, or always with FAULTTEST_SHOW_LOGS=1. The
// non-test files hold the fault tools: Proxy, Gateway and SMTPServer.
package faulttest
