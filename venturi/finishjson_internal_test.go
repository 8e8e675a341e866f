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

// The hand-written FinishRuns parameter decodes, with encoding/json, to exactly the runs
// and journal entries it was built from.
func TestAppendFinishRunsRoundTrip(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	sent := time.Now()
	job := func(n int) *claimed {
		return &claimed{id: ulid.Make(), runs: n, token: int64(1000 + n), started: started, sent: sent}
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
	buf := appendFinishRuns([]byte("garbage"), worker, reqs)
	buf = buf[len("garbage"):]
	var rows []struct {
		ID       string          `json:"id"`
		Token    int64           `json:"token"`
		State    string          `json:"state"`
		DelayUs  int64           `json:"delay_us"`
		Failed   bool            `json:"failed"`
		SetCarry bool            `json:"set_carry"`
		Carry    json.RawMessage `json:"carry"`
		Entry    []JournalEntry  `json:"entry"`
	}
	if err := json.Unmarshal(buf, &rows); err != nil {
		t.Fatalf("parameter is not JSON: %v\n%s", err, buf)
	}
	if len(rows) != len(reqs) {
		t.Fatalf("%d rows for %d runs", len(rows), len(reqs))
	}
	for i, r := range reqs {
		got := rows[i]
		if got.ID != uuidOf(r.job.id).String() || got.Token != r.job.token || got.State != string(r.state) ||
			got.DelayUs != delayOf(r.delay) || got.Failed != r.failed || got.SetCarry != r.setCarry {
			t.Errorf("run %d: got %+v", i, got)
		}
		wantCarry := string(r.carry)
		if wantCarry == "" {
			wantCarry = "null"
		}
		if string(got.Carry) != wantCarry {
			t.Errorf("run %d: carry %s, want %s", i, got.Carry, wantCarry)
		}
		// The reference: what encoding/json makes of the same entry.
		e := r.entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.job.runs, r.job.token, worker, r.job.started
		if !r.job.started.IsZero() {
			e.At = r.job.started.Add(r.ended.Sub(r.job.sent))
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
		if len(got.Entry) != 1 || !reflect.DeepEqual(got.Entry[0], want) {
			t.Errorf("run %d: entry\n got %+v\nwant %+v", i, got.Entry, want)
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
