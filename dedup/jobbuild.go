package dedup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/storage"
)

// ErrInvalid is wrapped by every constructor and handler error caused by a
// payload that can never succeed (bad address, traversal path, bad amount).
// Handlers also wrap asynq.SkipRetry with it, so asynq archives the task.
var ErrInvalid = errors.New("invalid payload")

// ErrMalformed is wrapped by the errors of a payload that is not the
// expected JSON at all (syntax, duplicate or case-variant names, unknown
// field, wrong type, trailing data), as opposed to well-formed JSON whose
// content is refused. It wraps ErrInvalid.
var ErrMalformed = fmt.Errorf("%w: malformed JSON", ErrInvalid)

// newJob marshals payload and builds its Job with the key and fingerprint
// derive gives it; the fingerprint is fpOf's instead when fpOf is
// not nil.
func newJob(typ string, payload, fpOf any, explicit, queue, scope string) (Job, error) {
	b, err := marshal(payload)
	if err != nil {
		return Job{}, fmt.Errorf("onceq: new %s: %w: %v", typ, ErrInvalid, err)
	}
	key, fp, err := deriveMarshalled(typ, b, explicit, volatileOf(payload))
	if err != nil {
		return Job{}, fmt.Errorf("onceq: new %s: %w: %w", typ, ErrInvalid, err)
	}
	if fpOf != nil {
		pb, err := marshal(fpOf)
		if err != nil {
			return Job{}, fmt.Errorf("onceq: new %s: %w: %v", typ, ErrInvalid, err)
		}
		if _, fp, err = deriveMarshalled(typ, pb, key.ID, nil); err != nil {
			return Job{}, fmt.Errorf("onceq: new %s: %w: %w", typ, ErrInvalid, err)
		}
	}
	if scope != "" {
		// The scope holds no ':', so no id of one scope is another's.
		id, err := callerID(typ, scope+":"+key.ID)
		if err == nil {
			key, err = NewKey(typ, id)
		}
		if err != nil {
			return Job{}, fmt.Errorf("onceq: new %s: %w: %w", typ, ErrInvalid, err)
		}
	}
	holder := key.String()
	h := headerMaps.Get().(map[string]string)
	h[headerKey], h[headerFingerprint] = holder, fp
	task := asynq.NewTaskWithHeaders(typ, b, h) // a copy of h
	j := Job{Task: task, Key: key, Fingerprint: fp, Queue: queue, Unique: defaultUnique}
	if key.Namespace == typ { // always, for a key derive built: see leanTask
		delete(h, headerKey)
		j.lean = leanCache{of: task, task: asynq.NewTaskWithHeaders(typ, b, h), key: key, holder: holder}
	}
	clear(h)
	headerMaps.Put(h)
	return j, nil
}

// headerMaps holds the small maps newJob fills for asynq.NewTaskWithHeaders,
// which keeps a copy: the task's copy is then the only map a build allocates.
var headerMaps = sync.Pool{New: func() any { return make(map[string]string, 2) }}

// leanCache is the lean task newJob built beside the Job's task, for
// leanTask: valid while the Job still holds that task and key.
type leanCache struct {
	of, task *asynq.Task
	key      Key
	holder   string // key.String()
}

// leanTask is j's task as the Producer sends it under j.Key.TaskID()
// (holder is j.Key.String()): without headerKey when the worker reads the
// same key from the task id (taskKeyOf), which saves encoding, storing
// and decoding it per task. Every valid key comes back from its task id
// (dedup's FuzzTaskID), so a valid key stands in for decoding the id on each
// enqueue. The Job keeps the header, so its task enqueued some other way
// still carries its key. A rebuilt task has no per-task asynq options;
// constructors set none. newJob built it already, for a valid key of the
// task's type; it is rebuilt only for a Job changed since (its Task, Key
// or headers).
func leanTask(j Job, holder string) *asynq.Task {
	h := j.Task.Headers()
	if c := j.lean; c.task != nil && c.of == j.Task && c.key == j.Key && c.holder == holder && h[headerKey] == holder && sameHeaders(h, c.task.Headers()) {
		return c.task
	}
	if k, err := storage.ParseKey(holder); err != nil || k != j.Key || k.Namespace != j.Task.Type() || h[headerKey] != holder {
		return j.Task
	}
	lean := make(map[string]string, len(h))
	for name, v := range h {
		if name != headerKey {
			lean[name] = v
		}
	}
	return asynq.NewTaskWithHeaders(j.Task.Type(), j.Task.Payload(), lean)
}

// sameHeaders says whether h is lean with headerKey added.
func sameHeaders(h, lean map[string]string) bool {
	if len(h) != len(lean)+1 {
		return false
	}
	for name, v := range lean {
		if w, ok := h[name]; !ok || w != v {
			return false
		}
	}
	return true
}

// marshal is json.Marshal without HTML escaping, so payloads read naturally in
// the dashboard ("<" stays "<" in an email body).
func marshal(v any) ([]byte, error) {
	m := marshallers.Get().(*marshaller)
	defer func() {
		if m.buf.Cap() <= 64<<10 { // do not pin a huge payload's buffer
			marshallers.Put(m)
		}
	}()
	m.buf.Reset()
	if err := m.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(m.buf.Bytes(), []byte("\n"))), nil
}

// marshaller is an encoder with its buffer, pooled: a marshal allocates
// only the bytes it returns.
type marshaller struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var marshallers = sync.Pool{New: func() any {
	m := new(marshaller)
	m.enc = json.NewEncoder(&m.buf)
	m.enc.SetEscapeHTML(false)
	return m
}}

// decode strictly decodes one payload into v: invalid UTF-8, duplicate
// member names, names that match a field only in another case, unknown
// members, trailing data and wrong types are errors wrapping ErrMalformed.
// With last-one-wins or case folding, `"amount":1,"Amount":9` would charge
// 9 while a reviewer of the body reads 1. The JSON v2 decoder has these
// modes by default; only the rejection of unknown members is added.
// An unknown member's error lists the names the type accepts.
func decode(data []byte, v any) error {
	err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	msg := stableMessage(err)
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && errors.Is(err, jsonv2.ErrUnknownName) && se.GoType != nil {
		if names := memberNames(se.GoType); len(names) > 0 {
			return fmt.Errorf("%w: %s; accepted: %s", ErrMalformed, msg, strings.Join(names, ", "))
		}
	}
	return fmt.Errorf("%w: %s", ErrMalformed, msg)
}

// stableMessage is err's text with the JSON v2 module's modal verb fixed:
// it says "cannot" or "unable to" at random per process, so that no one
// depends on its text; onceq's answers (a 400's detail, an exit 2's line)
// should read the same on every run.
func stableMessage(err error) string {
	return strings.Replace(err.Error(), "json: unable to ", "json: cannot ", 1)
}

// memberNames are the JSON member names of struct type t, as encoding/json
// names them (the tag's name, else the field's), in field order.
func memberNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}
