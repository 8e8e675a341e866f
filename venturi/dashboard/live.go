package dashboard

// The live stats endpoint the pages poll: the latest stats sample as flat JSON values.

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/venturi-dev/venturi"
)

// liveStats is the stats endpoint's body: the values the pages show, each under the key of
// the elements that show it (data-live), already formatted.
type liveStats struct {
	SampledAt string            `json:"sampled_at"`
	Values    map[string]string `json:"values"`
}

// statsJSON serves the latest stats sample (one read of the stats table) for the pages'
// live updates.
func (h *handler) statsJSON(w http.ResponseWriter, r *http.Request) {
	st, err := h.q.Stats(r.Context())
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		ref := newRef()
		h.log.ErrorContext(r.Context(), "venturi dashboard: stats", slog.String("ref", ref), slog.Any("error", err))
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"the stats could not be read (reference ` + ref + `)"}`))
		return
	}
	_ = json.NewEncoder(w).Encode(liveOf(st))
}

func liveOf(st venturi.Stats) liveStats {
	out := liveStats{Values: map[string]string{}}
	if !st.SampledAt.IsZero() {
		out.SampledAt = fmtTime(st.SampledAt)
	}
	for s, n := range totals(st, venturi.JobFilter{}) {
		out.Values["t:"+string(s)] = fmtCount(n)
	}
	for _, s := range states {
		if _, ok := out.Values["t:"+string(s)]; !ok {
			out.Values["t:"+string(s)] = "0"
		}
	}
	for _, qs := range st.Queues {
		for k, v := range queueValues(qs) {
			out.Values[k] = v
		}
	}
	out.Values["d:total"] = fmtCount(deferredTotal(st))
	for _, d := range st.DeferredMerges {
		out.Values[deferredKey(d.Kind, "waiting")] = fmtCount(d.Waiting)
		out.Values[deferredKey(d.Kind, "keys")] = fmtCount(d.Keys)
		out.Values[deferredKey(d.Kind, "age")] = fmtDuration(d.OldestAge)
	}
	return out
}

// deferredTotal is the number of enqueues from SQL that wait for a Go merge, all kinds.
func deferredTotal(st venturi.Stats) int64 {
	var n int64
	for _, d := range st.DeferredMerges {
		n += d.Waiting
	}
	return n
}

// deferredKey is the data-live key of a kind's deferred merges value: d:<field>:<kind>.
func deferredKey(kind, field string) string { return "d:" + field + ":" + kind }

// queueValues are one queue's live values, under the keys queueKey gives.
func queueValues(qs venturi.QueueStats) map[string]string {
	v := map[string]string{
		queueKey(qs.Queue, "lag"):         fmtDuration(qs.Lag),
		queueKey(qs.Queue, "completed/s"): fmtRate(qs.CompletedPerSec),
		queueKey(qs.Queue, "failed/s"):    fmtRate(qs.FailedPerSec),
		queueKey(qs.Queue, "dead/s"):      fmtRate(qs.DeadPerSec),
	}
	for _, s := range states {
		v[queueKey(qs.Queue, string(s))] = fmtCount(qs.Counts[s])
	}
	return v
}

// queueKey is the data-live key of a queue's value: q:<field>:<queue> (the queue last, as
// it may hold any character).
func queueKey(queue, field string) string { return "q:" + field + ":" + queue }
