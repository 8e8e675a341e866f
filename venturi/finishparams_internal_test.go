package venturi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// The FinishRuns parameters carry exactly the runs they were built from, and each
// hand-written journal entry decodes, with encoding/json, to the entry encoding/json
// would have written.
func TestFinishParamsRoundTrip(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	sent := time.Now()
	job := func(n int) *claimed {
		return &claimed{id: ulid.Make(), runs: n, token: int64(1000 + n), started: started, sent: sent, received: sent}
	}
	reqs := []*finishReq{
		{job: job(1), state: dbsqlc.VenturiJobStateCompleted, ended: sent.Add(1500 * time.Microsecond),
			entry: JournalEntry{Event: EventCompleted}},
		{job: job(2), state: dbsqlc.VenturiJobStateScheduled, delay: 3 * time.Second, failed: true,
			setCarry: true, carry: []byte(`{"sent":3,"s":"x"}`), ended: sent.Add(time.Second),
			entry: JournalEntry{Event: EventFailed, ResumeIn: 3 * time.Second,
				Note: "quote \" backslash \\ newline \n tab \t ctl \x01 nul \x00 bad \xff ok é 😀 <>&"}},
		{job: job(3), state: dbsqlc.VenturiJobStateAvailable, setCarry: true, ended: sent,
			entry: JournalEntry{Event: EventPaused, Attachment: json.RawMessage(`{"a":[1,2,{"b":null}]}`)}},
		{job: &claimed{id: ulid.Make(), token: 7}, state: dbsqlc.VenturiJobStateDead, failed: true, ended: sent,
			entry: JournalEntry{Event: EventDead, Note: strings.Repeat("é", 100)}},
	}
	const worker = `host-1-"odd"\worker`
	p := finishParams(worker, reqs)
	if len(p.Ids) != len(reqs) || len(p.Entries) != len(reqs) || len(p.Carries) != len(reqs) {
		t.Fatalf("%d ids, %d entries, %d carries for %d runs", len(p.Ids), len(p.Entries), len(p.Carries), len(reqs))
	}
	for i, r := range reqs {
		if p.Ids[i] != uuidOf(r.job.id) || p.Tokens[i] != r.job.token || p.States[i] != string(r.state) ||
			p.DelaysUs[i] != delayOf(r.delay) || p.Failed[i] != r.failed || p.SetCarry[i] != r.setCarry ||
			p.Carries[i] != string(r.carry) {
			t.Errorf("run %d: params differ from the request", i)
		}
		var entries []JournalEntry
		if err := json.Unmarshal([]byte(p.Entries[i]), &entries); err != nil {
			t.Fatalf("run %d: entry is not JSON: %v\n%s", i, err, p.Entries[i])
		}
		// The reference: what encoding/json makes of the same entry.
		e := r.entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.job.runs, r.job.token, worker, r.job.started
		if !r.job.started.IsZero() {
			e.At = r.job.started.Add(r.ended.Sub(r.job.received))
		}
		ref, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var want JournalEntry
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		want.Note = strings.ReplaceAll(want.Note, "\x00", "") // jsonb cannot store NUL
		if len(entries) != 1 || !reflect.DeepEqual(entries[0], want) {
			t.Errorf("run %d: entry\n got %+v\nwant %+v", i, entries, want)
		}
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x01\x1f\x7f", "\xff\xfe", "a\xc3", "é😀", "\u2028\u2029", "<script>&"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		ref, _ := json.Marshal(strings.ReplaceAll(s, "\x00", ""))
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Errorf("%q: decoded %q, encoding/json gives %q", s, got, want)
		}
	}
}
