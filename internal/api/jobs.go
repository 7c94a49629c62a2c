package api

import (
	"context"
	"net/http"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// Job is the body of GET /v1/jobs/{key}: dedup.JobStatus, the one status
// model the Producer, the CLI and the docs share. State is pending,
// scheduled, running, retry, done, failed, archived or unknown; Processed is
// true once the job's effect is recorded.
type Job = dedup.JobStatus

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	k, err := dedup.ParseKey(r.PathValue("key"))
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
