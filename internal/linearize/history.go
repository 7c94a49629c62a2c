package linearize

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History collects operations from concurrent clients, timed on the wall
// clock that Redis reads too (TIME), so lease deadlines compare with it.
type History struct {
	mu  sync.Mutex
	ops []porcupine.Operation
}

// Op is one operation in flight; End or Lost finishes it.
type Op struct {
	h      *History
	client int
	in     Input
	call   int64
}

// Begin starts recording an operation of client with input in (CallMs is
// filled in). Call it just before the store call.
func (h *History) Begin(client int, in Input) *Op {
	now := time.Now().UnixNano()
	in.CallMs = now / 1e6
	return &Op{h: h, client: client, in: in, call: now}
}

// End records the operation's known outcome (RetMs is filled in).
func (o *Op) End(out Output) {
	now := time.Now().UnixNano()
	out.RetMs = (now + 1e6 - 1) / 1e6
	o.h.add(o.client, o.in, out, o.call, now)
}

// Lost records that the operation's outcome is unknown: it may have taken
// effect at any moment after its call.
func (o *Op) Lost() {
	o.h.add(o.client, o.in, Output{Unknown: true, RetMs: Never}, o.call, math.MaxInt64)
}

func (h *History) add(client int, in Input, out Output, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// Operations returns a copy of the operations recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}
