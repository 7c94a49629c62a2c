package dedup

import (
	"context"
	"encoding/json"
)

type resultKey struct{}

// resultSink is what a run's handler hands the middleware: its result, and
// who wants to hear how recording it went.
type resultSink struct {
	b        []byte
	recorded []func(error)
}

// SetResult records the handler's result for the middleware to store with
// the completed record (and replay to duplicates). Outside the middleware it
// does nothing. The last call wins.
func SetResult(ctx context.Context, result []byte) {
	if s, ok := ctx.Value(resultKey{}).(*resultSink); ok {
		s.b = result
	}
}

// OnRecorded has the middleware call f once it has tried to record the
// success of the handler ctx belongs to: with nil when recorded, an error
// wrapping ErrLeaseLost when another worker had taken the key over (this
// run was fenced out and recorded nothing), or the store's error. A
// middleware inside onceq's (a task log) learns so what its handler's nil
// came to. f is not called when the handler fails or panics. Outside the
// middleware OnRecorded does nothing and returns false.
func OnRecorded(ctx context.Context, f func(error)) bool {
	s, ok := ctx.Value(resultKey{}).(*resultSink)
	if ok {
		s.recorded = append(s.recorded, f)
	}
	return ok
}

func withResultSink(ctx context.Context) (context.Context, *resultSink) {
	s := &resultSink{}
	return context.WithValue(ctx, resultKey{}, s), s
}

// done tells those OnRecorded registered how recording went.
func (s *resultSink) done(err error) {
	for _, f := range s.recorded {
		f(err)
	}
}

// Result is a job's stored result, as its handler set it (SetResult,
// Handle): the same bytes wherever it appears (Outcome, JobStatus). It
// prints as text, and encodes as JSON as it is when it is JSON, else as a
// JSON string; it decodes as json.RawMessage does.
type Result []byte

// String is the result as text.
func (r Result) String() string { return string(r) }

// MarshalJSON encodes r as it is when it is JSON, null when empty, else as
// a JSON string.
func (r Result) MarshalJSON() ([]byte, error) {
	switch {
	case len(r) == 0:
		return []byte("null"), nil
	case json.Valid(r):
		return r, nil
	}
	return json.Marshal(string(r))
}

// UnmarshalJSON keeps the JSON value's bytes, null as empty.
func (r *Result) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = nil
		return nil
	}
	*r = append((*r)[:0], b...)
	return nil
}
