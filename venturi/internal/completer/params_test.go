package completer_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

// journalEntry is e as the public type.
func journalEntry(e journalenc.Entry) venturi.JournalEntry {
	return venturi.JournalEntry{
		Event: venturi.Event(e.Event), Run: e.Run, Note: e.Note, Attachment: e.Attachment, Token: e.Token,
		Worker: e.Worker, StartedAt: e.StartedAt, At: e.At, ResumeIn: e.ResumeIn, Merge: e.Merge, Due: e.Due,
		DueBefore: e.DueBefore, DueAfter: e.DueAfter, Wait: e.Wait,
	}
}

// The FinishRuns parameters carry exactly the runs they were built from, and each
// hand-written journal entry decodes, with encoding/json, to the entry encoding/json
// would have written; a plain completion (the first run) sends no entry, only its
// duration, from which the database derives the same entry.
func TestParamsRoundTrip(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	sent := time.Now()
	job := func(n int) *jobrun.Job {
		return &jobrun.Job{ID: ulid.Make(), Runs: n, Token: int64(1000 + n), Started: started, Sent: sent, Received: sent}
	}
	ends := []*jobrun.End{
		{Job: job(1), State: dbsqlc.VenturiJobStateCompleted, Ended: sent.Add(1500 * time.Microsecond),
			Entry: journalenc.Entry{Event: string(venturi.EventCompleted)}},
		{Job: job(2), State: dbsqlc.VenturiJobStateScheduled, Delay: 3 * time.Second, Failed: true,
			SetCarry: true, Carry: []byte(`{"sent":3,"s":"x"}`), Ended: sent.Add(time.Second),
			Entry: journalenc.Entry{Event: string(venturi.EventFailed), ResumeIn: 3 * time.Second,
				Note: "quote \" backslash \\ newline \n tab \t ctl \x01 nul \x00 bad \xff ok é 😀 <>&"}},
		{Job: job(3), State: dbsqlc.VenturiJobStateAvailable, SetCarry: true, Ended: sent,
			Entry: journalenc.Entry{Event: string(venturi.EventPaused), Attachment: json.RawMessage(`{"a":[1,2,{"b":null}]}`)}},
		{Job: &jobrun.Job{ID: ulid.Make(), Token: 7}, State: dbsqlc.VenturiJobStateDead, Failed: true, Ended: sent,
			Entry: journalenc.Entry{Event: string(venturi.EventDead), Note: strings.Repeat("é", 100)}},
		{Job: job(5), State: dbsqlc.VenturiJobStateCompleted, Ended: sent.Add(time.Millisecond),
			Entry: journalenc.Entry{Event: string(venturi.EventCompleted), Note: "with a note"}},
		{Job: &jobrun.Job{ID: ulid.Make(), Token: 8}, State: dbsqlc.VenturiJobStateCompleted, Ended: sent,
			Entry: journalenc.Entry{Event: string(venturi.EventCompleted)}}, // no start known: not derived
	}
	const worker = `host-1-"odd"\worker`
	p := completer.Params(worker, completer.Retention{Completed: time.Hour, Dead: time.Hour}, ends)
	if len(p.Ids) != len(ends) || len(p.Entries) != len(ends) || len(p.Carries) != len(ends) {
		t.Fatalf("%d ids, %d entries, %d carries for %d runs", len(p.Ids), len(p.Entries), len(p.Carries), len(ends))
	}
	for i, r := range ends {
		if p.Ids[i] != (pgtype.UUID{Bytes: r.Job.ID, Valid: true}) || p.Tokens[i] != r.Job.Token || p.States[i] != string(r.State) ||
			p.DelaysUs[i] != r.Delay.Microseconds() || p.Failed[i] != r.Failed || p.SetCarry[i] != r.SetCarry ||
			p.Carries[i] != string(r.Carry) {
			t.Errorf("run %d: params differ from the end", i)
		}
		if derived := i == 0; derived != (p.Entries[i] == "") {
			t.Errorf("run %d: entry %q; want it derived: %v", i, p.Entries[i], derived)
		}
		if p.Entries[i] == "" {
			if want := r.Ended.Sub(r.Job.Received).Microseconds(); p.RanUs[i] != want {
				t.Errorf("run %d: ran %d µs, want %d", i, p.RanUs[i], want)
			}
			continue
		}
		var entries []venturi.JournalEntry
		if err := json.Unmarshal([]byte(p.Entries[i]), &entries); err != nil {
			t.Fatalf("run %d: entry is not JSON: %v\n%s", i, err, p.Entries[i])
		}
		// The reference: what encoding/json makes of the same entry.
		e := r.Entry
		e.Run, e.Token, e.Worker, e.StartedAt = r.Job.Runs, r.Job.Token, worker, r.Job.Started
		if !r.Job.Started.IsZero() {
			e.At = r.Job.Started.Add(r.Ended.Sub(r.Job.Received))
		}
		ref, err := json.Marshal(journalEntry(e))
		if err != nil {
			t.Fatal(err)
		}
		var want venturi.JournalEntry
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		want.Note = strings.ReplaceAll(want.Note, "\x00", "") // jsonb cannot store NUL
		if len(entries) != 1 || !reflect.DeepEqual(entries[0], want) {
			t.Errorf("run %d: entry\n got %+v\nwant %+v", i, entries, want)
		}
	}
}

// BenchmarkParams builds the parameters of a batch of 500 completed runs: its allocations
// per operation are a handful, whatever the batch's size.
func BenchmarkParams(b *testing.B) {
	started := time.Now()
	ends := make([]*jobrun.End, 500)
	for i := range ends {
		j := &jobrun.Job{ID: ulid.Make(), Runs: 1, Token: int64(i), Started: started, Sent: started, Received: started}
		ends[i] = &jobrun.End{Job: j, State: dbsqlc.VenturiJobStateCompleted, Ended: started.Add(time.Millisecond),
			Entry: journalenc.Entry{Event: string(venturi.EventCompleted), Note: "done", Attachment: json.RawMessage(`{"a":1}`)}}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = completer.Params("worker-1", completer.Retention{}, ends)
	}
}
