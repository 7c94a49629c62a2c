// Package tasks is onceq's task catalog. Each task type is declared once,
// in its own file, as a Spec: payload and validation, key rule (business id,
// volatile fields, namespace), windows and rate rules, HTTP route and
// handler. A Catalog of those declarations is what the CLI, batch files,
// the HTTP API, webhook routing, the worker and library code all build
// jobs through, so they agree on what "the same job" is. The Producer
// enqueues Jobs and reports Enqueued, Duplicate, Conflict or Throttled;
// Status is the one vocabulary for where a job is.
//
// Adding a task type: write one file with its payload, a Spec passed to
// Define (builtinKind inside this package; NewCatalog(w, append(Builtin(),
// yours.Kind())...) outside it), and its test. Routes, batch, the CLI's
// enqueue command and handler registration follow from the catalog.
package tasks
