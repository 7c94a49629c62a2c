// Package config loads the daemon's settings from the environment, and
// only from the environment: every variable is named ONCEQ_<NAME> and
// nothing else is read. It is the daemon's (cmd/worker, cmd/producer), not
// a library API: the library takes its options as Go structs.
//
// There are no unprefixed fallbacks. envconfig, given a prefix, also looks up
// the bare tag name (REDIS_URL, ENV, CONCURRENCY) when the prefixed one is
// unset, and Kubernetes injects such names into every pod (service links add
// REDIS_PORT=tcp://10.0.0.1:6379 for a Service called "redis"). To rule that
// out by construction, each field's envconfig tag holds the full name,
// prefix included, and the structs are processed with an empty prefix.
//
// Loading rejects what is almost always a deployment mistake: an unknown
// ONCEQ_ variable (a typo would otherwise be silently ignored), a secret that
// is set but empty, and values that fail validation. The set of known
// variables is the union over [Worker], [API] and [Producer], so one
// ConfigMap can feed both binaries; --help lists them. Variables
// Kubernetes derives from a Service whose name starts with "onceq"
// (ONCEQ_API_SERVICE_HOST, ONCEQ_PORT_8080_TCP_ADDR, ...) and the test
// harness's ONCEQ_TEST_*, ONCEQ_REQUIRE_REDIS and ONCEQ_FAULT_TESTS are not configuration and
// are ignored rather than rejected.
//
// Secrets (fields tagged secret:"true") never appear in errors, [Usage]
// defaults or the Redacted maps, so a binary can log its effective
// configuration at start-up.
package config
