package admin

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/onceq/onceq/dedup"
)

// jobPage redirects to asynqmon's page of the task of a job named by what
// an operator has at hand: its key from a log line or the API
// ("payment:charge/pmt-1"), or its task id from the dashboard's list
// ("email:send=!7E5f3b…"). asynqmon's own search box only navigates to
// /queues/{queue}/tasks/{what was typed}: it needs the queue, and a key's '/'
// breaks its route. The queue is found as Producer.Status finds it.
func jobPage(p *dedup.Producer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store") // the task moves on
		k, err := dedup.ParseKey(strings.TrimSpace(r.PathValue("key")))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		st, err := p.Status(r.Context(), k)
		if err != nil {
			http.Error(w, fmt.Sprintf("looking up %s: %v", k, err), http.StatusServiceUnavailable)
			return
		}
		if st.Queue == nil {
			http.Error(w, notFound(k, st), http.StatusNotFound)
			return
		}
		http.Redirect(w, r, dashboardRoot+"/queues/"+url.PathEscape(*st.Queue)+"/tasks/"+k.TaskID(), http.StatusFound)
	})
}

// notFound says what is known of a key whose task asynq no longer holds
// (its retention ended) or never held.
func notFound(k dedup.Key, st dedup.JobStatus) string {
	if !st.Known {
		return fmt.Sprintf("no task and no record for %s (task id %s)", k, k.TaskID())
	}
	return fmt.Sprintf("asynq holds no task for %s (task id %s); its record is %s", k, k.TaskID(), st.State)
}
