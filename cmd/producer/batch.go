package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/strictjson"
	"github.com/onceq/onceq/tasks"
)

// batchLine is one job of a batch file: the same type, payload and
// Idempotency-Key the HTTP API takes, built by the same catalog.
type batchLine struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

// readBatch checks every line before anything is enqueued: a bad file
// enqueues nothing, and the error names its line.
func readBatch(c *tasks.Catalog, in io.Reader) ([]dedup.Job, error) {
	var jobs []dedup.Job
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var bl batchLine
		if err := strictjson.Decode([]byte(line), &bl); err != nil {
			return nil, fmt.Errorf("batch line %d: %w", n, err)
		}
		j, err := c.Build(bl.Type, bl.Payload, bl.IdempotencyKey, "")
		if err != nil {
			return nil, fmt.Errorf("batch line %d: %w", n, err)
		}
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("batch line %d: %w", n+1, err)
	}
	return jobs, nil
}

func batch(ctx context.Context, p *dedup.Producer, jobs []dedup.Job, out io.Writer) error {
	r := enqueueBatch(dedup.WithSource(ctx, "batch"), p, jobs)
	for i, o := range r.Outcomes {
		if r.Errors[i] != nil {
			fmt.Fprintf(out, "error %s: %v\n", jobs[i].Key, r.Errors[i])
			continue
		}
		printOutcome(out, o)
	}
	fmt.Fprintf(out, "batch: %d enqueued, %d blocked, %d failed, %d conflicts\n", r.Enqueued, r.Blocked, r.Failed, r.Conflict)
	switch {
	case r.Failed > 0:
		return fmt.Errorf("batch: %d jobs failed", r.Failed)
	case r.Conflict > 0:
		return &exitErr{code: exitConflict, err: fmt.Errorf("batch: %d jobs conflict with jobs accepted before", r.Conflict)}
	}
	return nil
}

func printOutcome(w io.Writer, o dedup.Outcome) {
	switch o.Decision {
	case dedup.Enqueued:
		fmt.Fprintf(w, "enqueued %s as task %s on queue %s", o.Key, shellWord(o.TaskID), o.Queue)
		switch {
		case o.State == dedup.StatusWaiting:
			fmt.Fprintf(w, " (incarnation %d: waits as the successor of its running job", o.Incarnation)
			if o.Replaced {
				fmt.Fprint(w, ", in place of the one that waited")
			}
			fmt.Fprint(w, ")")
		case o.Incarnation > 1 && o.Reason != "":
			fmt.Fprintf(w, " (incarnation %d: %s)", o.Incarnation, o.Reason)
		case o.Incarnation > 1:
			fmt.Fprintf(w, " (incarnation %d)", o.Incarnation)
		}
		if o.Replaced && o.State != dedup.StatusWaiting {
			fmt.Fprint(w, " (replaced its job that had not started)")
		}
		fmt.Fprintln(w)
	case dedup.Duplicate:
		// The job that holds the key, by its key where its task id is one.
		existing := o.TaskID
		if k, err := dedup.ParseKey(o.TaskID); err == nil {
			existing = k.String()
		}
		fmt.Fprintf(w, "duplicate of %s: %s", existing, o.Reason)
		if len(o.Result) > 0 {
			fmt.Fprintf(w, "; result %s", o.Result)
		}
		fmt.Fprintln(w)
	case dedup.Conflict:
		fmt.Fprintf(w, "conflict %s: %s\n", o.Key, o.Reason)
	case dedup.Throttled:
		after := o.RetryAfter.Round(time.Second)
		if after == 0 {
			after = o.RetryAfter.Round(time.Millisecond)
		}
		fmt.Fprintf(w, "throttled %s: %s; retry in %s\n", o.Key, o.Reason, after)
	}
}

// shellWord quotes s for a POSIX shell when it holds anything but
// letters, digits and :/._=@+,-~: a content-hash task id ("=!7E…") pasted
// into bash is otherwise a history expansion.
func shellWord(s string) string {
	safe := func(r rune) bool {
		return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":/._=@+,-~", r))
	}
	// A "~" expands only at the start of a word.
	if s != "" && s[0] != '~' && !strings.ContainsFunc(s, func(r rune) bool { return !safe(r) }) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// status prints the one status model, as GET /v1/jobs does.
// With wait, it reads again until the job is done or failed for good, or
// wait has passed.
func status(ctx context.Context, p *dedup.Producer, k dedup.Key, wait time.Duration, out io.Writer) error {
	deadline := time.Now().Add(wait)
	pause := 20 * time.Millisecond
	var st dedup.JobStatus
	for {
		var err error
		if st, err = p.Status(ctx, k); err != nil {
			return err
		}
		if final(st.State) || time.Now().Add(pause).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
	// The status names the key's history, which producer history lists.
	h, err := p.History(ctx, k)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // a terminal, not a web page: "<a@example.com>" as sent
	return enc.Encode(struct {
		dedup.JobStatus
		History int `json:"history,omitempty"`
	}{st, len(h)})
}

// history prints k's history, newest first, one JSON line per decision.
func history(ctx context.Context, p *dedup.Producer, k dedup.Key, out io.Writer) error {
	h, err := p.History(ctx, k)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for _, e := range h {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// final: the job will not move on its own.
func final(s dedup.Status) bool {
	return s == dedup.StatusDone || s == dedup.StatusFailed || s == dedup.StatusArchived
}

// batchResult is the per-item outcome of enqueueBatch and its counts.
type batchResult struct {
	Outcomes []dedup.Outcome
	Errors   []error // Errors[i] is set when item i failed outright
	Enqueued int
	Blocked  int // duplicates and throttled
	Conflict int // keys accepted before with other content
	Failed   int
}

// enqueueBatch enqueues each job in order (a later job is a duplicate of an
// earlier one in the same batch) and reports per-item outcomes.
func enqueueBatch(ctx context.Context, p *dedup.Producer, jobs []dedup.Job) batchResult {
	r := batchResult{Outcomes: make([]dedup.Outcome, len(jobs)), Errors: make([]error, len(jobs))}
	for i, j := range jobs {
		o, err := p.Enqueue(ctx, j)
		r.Outcomes[i], r.Errors[i] = o, err
		switch {
		case err != nil:
			r.Failed++
		case o.Decision == dedup.Enqueued:
			r.Enqueued++
		case o.Decision == dedup.Conflict:
			r.Conflict++
		default:
			r.Blocked++
		}
	}
	return r
}
