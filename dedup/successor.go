package dedup

import (
	"context"
	"time"

	"github.com/onceq/onceq/dedup/internal/asynqwire"
	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/storage"
)

// sweepEvery is how often a Server looks for successors whose key's run
// has ended. A run that ends through asynq's acknowledgement or archive
// leaves its successor waiting at most this long; a variable so tests can
// shorten it.
var sweepEvery = 250 * time.Millisecond

// sweepBatch bounds the keys one sweep call looks at.
const sweepBatch = 128

// sweepLoop starts the successors whose key's run has ended (Repeat
// "successor"). Every worker runs it; each start is one atomic step that
// does nothing once another worker did it, or while the run goes on.
func (s *Server) sweepLoop() {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.sweepOnce(context.Background())
	}
}

// sweepOnce walks the successors hash once, in batches.
func (s *Server) sweepOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, successorsKey, cursor, "", sweepBatch).Result()
		if err != nil {
			return // Redis trouble: the next tick tries again
		}
		s.startSuccessors(ctx, kv)
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// startSuccessors runs one sweep call over kv, HSCAN's fields and values
// (namespace/id, queue).
func (s *Server) startSuccessors(ctx context.Context, kv []string) {
	ws := make([]asynqwire.Waiting, 0, len(kv)/2)
	keys := make([]Key, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k, err := storage.ParseKey(kv[i])
		if err != nil {
			s.rdb.HDel(ctx, successorsKey, kv[i]) // not the engine's: nothing waits under it
			continue
		}
		keys = append(keys, k)
		ws = append(ws, asynqwire.Waiting{Field: kv[i], Queue: kv[i+1], ID: k.TaskID(), Record: recordKey(k), Next: nextKey(k),
			History: historyKey(k)})
	}
	if len(ws) == 0 {
		return
	}
	now := time.Now()
	started, err := asynqwire.Sweep(ctx, s.rdb, successorsKey, ws, now, history.Head(now, sourceWorker, ""))
	if err != nil {
		return
	}
	for i, n := range started {
		if n == 1 {
			s.mw.opts.Observer(ctx, Event{Op: opSuccessor, Key: keys[i], Outcome: outcomeStarted,
				Reason: "its key's run ended: the successor is the key's next incarnation, pending in " + ws[i].Queue})
		}
	}
}
