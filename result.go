package onceq

import "context"

type resultKey struct{}

type resultSink struct{ b []byte }

// SetResult records the handler's result for the middleware to store with
// the completed record (and replay to duplicates). Outside the middleware it
// does nothing. The last call wins.
func SetResult(ctx context.Context, result []byte) {
	if s, ok := ctx.Value(resultKey{}).(*resultSink); ok {
		s.b = result
	}
}

func withResultSink(ctx context.Context) (context.Context, *resultSink) {
	s := &resultSink{}
	return context.WithValue(ctx, resultKey{}, s), s
}
