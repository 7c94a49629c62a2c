// Package daemon is the one start-up of onceq's long-running processes, the
// worker and `producer serve`: shutdown signals, the Redis connection with
// its checks, the metrics registry, readiness and the admin server, and
// their ordered shutdown. cmd/* mains only wire what is theirs.
package daemon
