package dashboard

// The bulk actions: a dry run that counts, a confirmation form, the action over the filter.

import (
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/venturi-dev/venturi"
)

type bulkAction struct {
	name, done, verb string
	grant            Action
	run              func(q *venturi.Queue, rq *request, f venturi.JobFilter, o venturi.BulkOptions) (venturi.BulkResult, error)
}

var bulkActions = []bulkAction{
	{"retry", "retried", "Retry", Retry, func(q *venturi.Queue, rq *request, f venturi.JobFilter, o venturi.BulkOptions) (venturi.BulkResult, error) {
		return q.RetryJobs(rq.ctx, f, o)
	}},
	{"cancel", "cancelled", "Cancel", Cancel, func(q *venturi.Queue, rq *request, f venturi.JobFilter, o venturi.BulkOptions) (venturi.BulkResult, error) {
		return q.CancelJobs(rq.ctx, f, o)
	}},
	{"delete", "deleted", "Delete", Delete, func(q *venturi.Queue, rq *request, f venturi.JobFilter, o venturi.BulkOptions) (venturi.BulkResult, error) {
		return q.DeleteJobs(rq.ctx, f, o)
	}},
}

func bulkOf(name string) (bulkAction, error) {
	for _, a := range bulkActions {
		if a.name == name {
			return a, nil
		}
	}
	return bulkAction{}, errNotFound
}

func reasonOf(r *http.Request) (string, error) {
	reason := r.PostFormValue("reason")
	if len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return "", badRequest("The reason must be at most " + strconv.Itoa(MaxReasonBytes) + " bytes of text.")
	}
	return reason, nil
}

type bulkData struct {
	Action, Verb string
	Filter       string
	Result       venturi.BulkResult
	Max          int
	ListURL      string
	FormURL      string
}

// dryRunCountMax is how many matching jobs a bulk action's dry run counts at most, so
// that the confirmation page stays fast (about 7 µs a job).
const dryRunCountMax = 5_000

// bulkConfirm is the first step of a bulk action: a dry run counts what it would change
// (the filter's matching jobs, by the listing's indexes where it can), and the page asks
// for a confirmation.
func (h *handler) bulkConfirm(rq *request) (*view, error) {
	act, err := bulkOf(rq.r.PathValue("action"))
	if err != nil {
		return nil, err
	}
	if err := rq.need(act.grant); err != nil {
		return nil, err
	}
	if err := h.sameOrigin(rq); err != nil {
		return nil, err
	}
	text := rq.r.URL.Query().Get("q")
	f, err := parseFilter(text)
	if err != nil {
		return nil, badRequest("The filter is not valid: " + filterMessage(err))
	}
	res, err := act.run(h.q, rq, f, venturi.BulkOptions{DryRun: true, CountMax: dryRunCountMax})
	if err != nil {
		return nil, err
	}
	d := &bulkData{Action: act.name, Verb: act.verb, Filter: f.String(), Result: res, Max: venturi.MaxBulkJobs,
		ListURL: h.url("/jobs", "q", f.String()), FormURL: h.url("/bulk/" + act.name)}
	return &view{tmpl: "bulk", title: act.verb + " jobs", nav: "jobs", data: d}, nil
}

// bulkAction runs a confirmed bulk action over the filter and redirects to the list of the
// jobs it matched.
func (h *handler) bulkAction(rq *request) (string, error) {
	act, err := bulkOf(rq.r.PathValue("action"))
	if err != nil {
		return "", err
	}
	if err := rq.need(act.grant); err != nil {
		return "", err
	}
	text := rq.r.PostFormValue("q")
	f, err := parseFilter(text)
	if err != nil {
		return "", badRequest("The filter is not valid: " + filterMessage(err))
	}
	reason, err := reasonOf(rq.r)
	if err != nil {
		return "", err
	}
	res, err := act.run(h.q, rq, f, venturi.BulkOptions{Reason: reason})
	if err != nil {
		return "", err
	}
	v := url.Values{"q": {f.String()}, "done": {act.done}, "n": {strconv.Itoa(res.Changed)}}
	return "/jobs?" + v.Encode(), nil
}
