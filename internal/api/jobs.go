package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Job is the body of GET /v1/jobs/{key}: dedup.JobStatus, the one status
// model the Producer, the CLI and the docs share. State is pending,
// scheduled, running, retry, done, failed, archived or unknown; Processed is
// true once the job's effect is recorded.
type Job = dedup.JobStatus

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("key")
	// GET /v1/jobs/{key}/history; an id that itself ends in "/history"
	// escapes its '/' as %2F.
	hist := strings.HasSuffix(r.URL.EscapedPath(), historySuffix)
	if hist {
		raw = strings.TrimSuffix(raw, historySuffix)
	}
	k, err := dedup.ParseKey(raw)
	if err != nil {
		problem(http.StatusBadRequest, probBadRequest, "the job must be a key namespace/id (URL-escaped) or its task id: "+err.Error()).write(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
	defer cancel()
	mine, err := readsAll(ctx), error(nil)
	if !mine {
		mine, err = s.owns(ctx, k, principal(ctx))
	}
	if hist {
		s.history(ctx, w, k, mine, err)
		return
	}
	var st dedup.JobStatus
	if err == nil && mine {
		st, err = s.opts.Producer.Status(ctx, k)
	}
	if err != nil {
		s.opts.Log.Warn("api: job status failed", zap.String("key", k.String()), zap.Error(err))
		unavailable("retry later").write(w)
		return
	}
	// Another client's job is as unknown to the caller as a missing one;
	// an operator (Client.ReadAll) reads every job.
	if !mine || !st.Known {
		problem(http.StatusNotFound, probNotFound, "no job "+k.String()+" is known (or it expired)").write(w)
		return
	}
	jsonResponse(http.StatusOK, st).write(w)
}

const historySuffix = "/history"

// History is the body of GET /v1/jobs/{key}/history: the key's last
// decisions, newest first (dedup.Producer.History).
type History struct {
	Key     string               `json:"key"`
	Entries []dedup.HistoryEntry `json:"entries"`
}

// history answers GET /v1/jobs/{key}/history, scoped as GET /v1/jobs/{key}:
// mine is whether the caller may read k (err when that read failed).
func (s *server) history(ctx context.Context, w http.ResponseWriter, k dedup.Key, mine bool, err error) {
	var es []dedup.HistoryEntry
	if err == nil && mine {
		es, err = s.opts.Producer.History(ctx, k)
	}
	if err != nil {
		s.opts.Log.Warn("api: job history failed", zap.String("key", k.String()), zap.Error(err))
		unavailable("retry later").write(w)
		return
	}
	if !mine || len(es) == 0 {
		problem(http.StatusNotFound, probNotFound, "no history of "+k.String()+" is known (or it expired)").write(w)
		return
	}
	jsonResponse(http.StatusOK, History{Key: k.String(), Entries: es}).write(w)
}

// reset is DELETE /v1/jobs/{key}: an operator frees a key at once
// (dedup.Producer.Reset, as `producer reset` does) and gets what it was.
// Any other client is refused with 403 before anything is read, so the
// answer tells nothing about the key. ?running=finish lets a running job
// finish unrecorded; without it a running job is a 409 and nothing changes.
func (s *server) reset(w http.ResponseWriter, r *http.Request) {
	who, _ := r.Context().Value(principalKey{}).(caller)
	if !who.operates() {
		problem(http.StatusForbidden, probNotOperator, "resetting a job takes an operator's token (name:token:operator)").write(w)
		return
	}
	k, err := dedup.ParseKey(r.PathValue("key"))
	if err != nil {
		problem(http.StatusBadRequest, probBadRequest, "the job must be a key namespace/id (URL-escaped) or its task id: "+err.Error()).write(w)
		return
	}
	q := r.URL.Query()
	finish := q.Get("running") == "finish"
	if q.Has("running") && !finish {
		problem(http.StatusBadRequest, probBadRequest, "running takes one value, finish (let a running job finish unrecorded)").write(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
	defer cancel()
	owner, err := s.owner(ctx, k)
	var before dedup.JobStatus
	if err == nil {
		before, err = s.opts.Producer.Reset(dedup.WithSource(ctx, source(ctx)), k, finish)
	}
	if errors.Is(err, dedup.ErrRunning) {
		problemOf(Problem{Type: ProblemType + probRunning.slug, Title: probRunning.title, Status: http.StatusConflict, Key: k.String(),
			Detail: "the job is running and nothing was reset; add ?running=finish to free the key now and let the run finish unrecorded"}).write(w)
		return
	}
	if err != nil {
		s.opts.Log.Warn("api: job reset failed", zap.String("client", who.name), zap.String("key", k.String()), zap.Error(err))
		unavailable("the key may or may not have been reset; read the job, then retry").write(w)
		return
	}
	if !before.Known {
		problem(http.StatusNotFound, probNotFound, "no job "+k.String()+" is known (or it expired); nothing was reset").write(w)
		return
	}
	// The reset job's owner no longer reads the key's next job.
	if err := s.dropOwner(ctx, k, owner); err != nil {
		s.opts.Log.Warn("api: dropping the reset job's owner failed", zap.String("key", k.String()), zap.Error(err))
	}
	s.opts.Log.Warn("api: job reset", zap.String("client", who.name), zap.String("namespace", k.Namespace),
		zap.String("key", k.ID), zap.String("was", string(before.State)), zap.Bool("finish_running", finish))
	jsonResponse(http.StatusOK, before).write(w)
}
