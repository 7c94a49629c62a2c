// Package tasks holds the daemon's built-in task types, an application of
// the library (github.com/onceq/onceq/dedup): email:send, sms:send,
// scan:file, payment:charge, webhook:process and order:fulfil. It is the
// daemon's, not a library API: programs of your own define their types
// with dedup.Define. Each is one file: its payload and validation, a
// dedup.Spec built from the configured Windows, and its
// handler, bound to the Spec with dedup.Handle. The handlers talk to the
// outside through small ports declared beside the type that needs them
// (Mailer, SMSSender, Gateway, and the Scanner's ScanEngine); the adapters
// that implement them live in packages named for what they talk to
// (tasks/smtp, tasks/outbox, tasks/stripe, tasks/gateway, tasks/clamd) and
// import this one, never the reverse; only cmd/* knows both.
//
// NewCatalog is the daemon's catalog: these types under one set of
// windows, plus any extra kinds, with Register putting their handlers on
// an asynq mux.
//
// Adding a task type: one file with its payload, a spec function and a
// handler, a line in newKinds and handlers, and its test. Routes, batch,
// the CLI's enqueue command and handler registration follow from the
// catalog.
package tasks
