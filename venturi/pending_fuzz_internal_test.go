package venturi

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/oklog/ulid/v2"
)

// fuzzMergeTask is a task with a typed merge whose decision depends on the stored job.
type fuzzMergeTask struct {
	Msg  string   `json:"msg"`
	N    int      `json:"n"`
	Tags []string `json:"tags"`
}

type fuzzMergeCarry struct {
	Done  int            `json:"done"`
	Marks map[string]int `json:"marks"`
}

func (fuzzMergeTask) Kind() string       { return "fuzz-merge" }
func (fuzzMergeTask) DedupKey() DedupKey { return "k" }
func (t fuzzMergeTask) Merge(existing Pending[fuzzMergeTask, fuzzMergeCarry]) Merge[fuzzMergeTask, fuzzMergeCarry] {
	switch (existing.Payload.N + existing.Carry.Done + existing.RunCount + len(existing.Journal)) & 3 {
	case 0:
		return existing.Keep()
	case 1:
		return existing.Replace()
	case 2:
		return existing.With(fuzzMergeTask{Msg: existing.Payload.Msg + t.Msg, N: existing.Payload.N + 1}, existing.Carry)
	}
	return existing.Independent()
}

// FuzzPendingDecode feeds arbitrary stored bytes to Pending.fill and to the reflective
// merge path a dedup collision takes: neither may panic, and a successful fill reflects
// exactly what was stored.
func FuzzPendingDecode(f *testing.F) {
	f.Add([]byte(`{"msg":"hi","n":3,"tags":["a"]}`), []byte(`{"done":2,"marks":{"x":1}}`), []byte(`[{"event":"paused","run":1}]`), 1, 0)
	f.Add([]byte(`{}`), []byte(nil), []byte(`[]`), 0, 0)
	f.Add([]byte(`null`), []byte(`null`), []byte(`null`), -1, 5)
	f.Add([]byte(`{"msg":5}`), []byte(`"x"`), []byte(`{}`), 2, 2)
	f.Add([]byte(`{"n":1e400}`), []byte(`{"marks":[]}`), []byte(`[{"event":1}]`), 3, 1)
	f.Add([]byte(``), []byte(`{`), []byte(``), 0, 0)
	f.Add([]byte(`{"msg":"\ud800"}`), []byte(`{"done":-1}`), []byte(`[{"resume_in":"1s"}]`), 7, 7)
	m, err := mergerFor(reflect.TypeFor[fuzzMergeTask]())
	if err != nil || !m.method.Func.IsValid() {
		f.Fatalf("merger: %v", err)
	}
	f.Fuzz(func(t *testing.T, payload, carry, journal []byte, runs, failures int) {
		c := &candidate{id: ulid.ULID{1}, priority: 3, payload: payload, carry: carry, runs: runs, failures: failures, journal: journal}
		var p Pending[fuzzMergeTask, fuzzMergeCarry]
		if err := p.fill(c); err == nil {
			if p.ID != c.id || p.Priority != 3 || p.RunCount != runs || p.Failures != failures {
				t.Fatalf("fill kept %+v from %+v", p, c)
			}
			var want fuzzMergeTask
			if json.Unmarshal(payload, &want) != nil || !reflect.DeepEqual(p.Payload, want) {
				t.Fatalf("payload %+v from %s", p.Payload, payload)
			}
		}
		decision, with, withCarry, _, err := m.merge(fuzzMergeTask{Msg: "in"}, c)
		if err != nil {
			if decision != 0 || with != nil || withCarry != nil {
				t.Fatalf("merge failed (%v) but returned %v %v %v", err, decision, with, withCarry)
			}
			return
		}
		if decision < ActionKept || decision > ActionIndependent {
			t.Fatalf("merge returned decision %v", decision)
		}
		if (decision == ActionMerged) != (with != nil) || (decision == ActionMerged) != (withCarry != nil) {
			t.Fatalf("decision %v with task %v and carry %v", decision, with, withCarry)
		}
		if decision == ActionMerged {
			if _, ok := with.(fuzzMergeTask); !ok {
				t.Fatalf("With task is %T", with)
			}
			if _, ok := withCarry.(fuzzMergeCarry); !ok {
				t.Fatalf("With carry is %T", withCarry)
			}
		}
	})
}
