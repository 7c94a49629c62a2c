package dedup

// asynq v0.26.0's TaskMessage (internal/proto/asynq.proto), as the fast
// recoverer edits it, a refused enqueue describes it and a joined
// acknowledgement retains it: the only place onceq reads asynq's encoding.

import (
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/encoding/protowire"
)

// TaskMessage's field numbers.
const (
	fieldType        = 1
	fieldPayload     = 2
	fieldRetry       = 5  // retries allowed
	fieldRetried     = 6  // retries so far
	fieldErrorMsg    = 7  // the last error
	fieldLastFailure = 11 // last_failed_at, Unix s
	fieldCompletedAt = 13 // Unix s
	fieldHeaders     = 15 // map<string, string>
)

// msgFields calls f with each field of the protobuf message msg: its number,
// wire type, the whole field (tag included) and its value.
func msgFields(msg []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte)) error {
	for b := msg; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		f(num, typ, b[:n+m], b[n:n+m])
		b = b[n+m:]
	}
	return nil
}

var taskStates = map[string]asynq.TaskState{
	"active": asynq.TaskStateActive, "pending": asynq.TaskStatePending, "scheduled": asynq.TaskStateScheduled,
	"retry": asynq.TaskStateRetry, "archived": asynq.TaskStateArchived, "completed": asynq.TaskStateCompleted,
	"aggregating": asynq.TaskStateAggregating,
}

// taskInfoOf is the part of asynq's TaskInfo the producer reads, from a
// task hash's msg, state and result, as asynq's Inspector would give it.
func taskInfoOf(queue, id string, msg []byte, state string, result []byte) (*asynq.TaskInfo, error) {
	st, ok := taskStates[state]
	if !ok {
		return nil, fmt.Errorf("onceq: task %s in unknown state %q", id, state)
	}
	info := &asynq.TaskInfo{ID: id, Queue: queue, State: st, Headers: map[string]string{}}
	if len(result) > 0 {
		info.Result = result
	}
	var herr error
	err := msgFields(msg, func(num protowire.Number, typ protowire.Type, _, value []byte) {
		if typ == protowire.VarintType && num == fieldCompletedAt {
			if v, _ := protowire.ConsumeVarint(value); v != 0 {
				info.CompletedAt = time.Unix(int64(v), 0)
			}
			return
		}
		if typ != protowire.BytesType {
			return
		}
		v, _ := protowire.ConsumeBytes(value)
		switch num {
		case fieldType:
			info.Type = string(v)
		case fieldPayload:
			info.Payload = v
		case fieldErrorMsg:
			info.LastErr = string(v)
		case fieldHeaders:
			// A map entry is a message of key (1) and value (2).
			var k, val string
			if err := msgFields(v, func(num protowire.Number, typ protowire.Type, _, value []byte) {
				if typ != protowire.BytesType {
					return
				}
				switch s, _ := protowire.ConsumeBytes(value); num {
				case 1:
					k = string(s)
				case 2:
					val = string(s)
				}
			}); err != nil {
				herr = err
			}
			info.Headers[k] = val
		}
	})
	if err == nil {
		err = herr
	}
	if err != nil {
		return nil, err
	}
	return info, nil
}

// withoutPayload is the encoded TaskMessage msg without its payload. The
// record answers a repeat of a done job with its result, so the copy asynq
// retains for the unique window need not hold the payload: it stays
// readable (type, headers, result) and is smaller. msg unchanged if it does
// not parse.
func withoutPayload(msg []byte) []byte {
	out := make([]byte, 0, len(msg))
	if err := msgFields(msg, func(num protowire.Number, _ protowire.Type, field, _ []byte) {
		if num != fieldPayload {
			out = append(out, field...)
		}
	}); err != nil {
		return msg
	}
	return out
}
