// Package tasks is onceq's task catalog: for each task type a payload, a
// constructor that sets its dedup policy, and a handler; plus the Producer
// that enqueues Jobs and reports Enqueued, Duplicate or Throttled.
package tasks
