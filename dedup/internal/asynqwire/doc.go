// Package asynqwire is the library's one door into asynq's internals: the
// scripts asynq's client and server send (lua/asynq, byte for byte, found
// by their SHA-1), the library's scripts that stand in for them (the insert
// guard, the joined dequeue and acknowledgement, the recover step), asynq's
// key layout, task hash fields and task message encoding, and the check
// that the linked asynq is one of Verified.
//
// Nothing else in the library knows asynq's private layout. What it needs
// of it goes through this package: Check before relying on any of it;
// Intercept and WithGuard for inserts; DequeueCall, Dequeue, AckCall and
// Acks for the worker's join; Active and Recover for the fast recoverer;
// TaskInfo to describe a task found in an insert's step.
package asynqwire
