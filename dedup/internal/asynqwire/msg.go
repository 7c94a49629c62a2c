package asynqwire

// asynq's TaskMessage (internal/proto/asynq.proto), as the recover step
// edits it, a refused insert describes it and a joined acknowledgement
// retains it.

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

// TaskInfo is the part of asynq's TaskInfo the producer reads, from a
// task hash's msg, state and result, as asynq's Inspector would give it.
func TaskInfo(queue, id string, msg []byte, state string, result []byte) (*asynq.TaskInfo, error) {
	st, ok := taskStates[state]
	if !ok {
		return nil, fmt.Errorf("dedup: task %s in unknown state %q", id, state)
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

// WithoutPayload is the encoded TaskMessage msg without its payload. The
// record answers a repeat of a done job with its result, so the copy asynq
// retains for the unique window need not hold the payload: it stays
// readable (type, headers, result) and is smaller. msg unchanged if it does
// not parse.
func WithoutPayload(msg []byte) []byte {
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

// FailedAttempt returns msg with one more attempt counted, errMsg as its
// last error and now as its last failure, as asynq's Retry and Archive
// write it, and whether its retries are spent (asynq archives it then).
func FailedAttempt(msg []byte, errMsg string, now time.Time) ([]byte, bool, error) {
	var retry, retried int64
	out := make([]byte, 0, len(msg)+len(errMsg)+16)
	err := msgFields(msg, func(num protowire.Number, typ protowire.Type, field, value []byte) {
		switch {
		case num == fieldRetry && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(value)
			retry = int64(int32(v))
		case num == fieldRetried && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(value)
			retried = int64(int32(v))
			return
		case num == fieldErrorMsg || num == fieldLastFailure:
			return
		}
		out = append(out, field...)
	})
	if err != nil {
		return nil, false, err
	}
	// retried is what asynq's recoverer compares with retry before it
	// counts the attempt (Retried >= Retry: archive).
	spent := retried >= retry
	if !spent {
		retried++
	}
	out = protowire.AppendTag(out, fieldRetried, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(retried))
	out = protowire.AppendTag(out, fieldErrorMsg, protowire.BytesType)
	out = protowire.AppendString(out, errMsg)
	out = protowire.AppendTag(out, fieldLastFailure, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(now.Unix()))
	return out, spent, nil
}
