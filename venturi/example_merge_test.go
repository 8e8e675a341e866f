package venturi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"slices"

	"github.com/venturi-dev/venturi"
)

// Digest mails one user a digest of new items. Enqueues for the same user coalesce into
// one pending digest that covers every item.
type Digest struct {
	UserID  int64    `json:"user_id"`
	Items   []string `json:"items"`
	Rebuild bool     `json:"rebuild,omitempty"` // recompute from scratch
}

// DigestProgress is the digest's carry: how many items were already mailed.
type DigestProgress struct {
	Sent int `json:"sent"`
}

// maxDigestItems is the most items one digest mails.
const maxDigestItems = 3

// Kind names the task.
func (Digest) Kind() string { return "digest" }

// DedupKey makes the pending digests of one user merge candidates.
func (d Digest) DedupKey() venturi.DedupKey { return venturi.KeyOf("user", d.UserID) }

// Merge decides what an enqueue does to the user's pending digest. It sees the pending
// job's payload, typed carry, run count and journal.
func (d Digest) Merge(existing venturi.Pending[Digest, DigestProgress]) venturi.Merge[Digest, DigestProgress] {
	if d.Rebuild {
		return existing.Replace() // the new payload supersedes the pending one; the carry resets
	}
	items := slices.Clone(existing.Payload.Items)
	for _, it := range d.Items {
		if !slices.Contains(items, it) {
			items = append(items, it)
		}
	}
	switch {
	case len(items) == len(existing.Payload.Items):
		return existing.Keep() // nothing new: leave the pending digest as it is
	case len(items) > maxDigestItems:
		return existing.Independent() // too big: a new digest beside the pending one
	}
	// Union the items and keep the progress, so a digest that already paused half-way
	// continues where it was.
	return existing.With(Digest{UserID: d.UserID, Items: items}, existing.Carry)
}

// A typed Merge method decides what a colliding enqueue does: Keep, Replace, With or
// Independent. Each enqueue reports its decision as its Action.
func ExampleMerge() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{}) // no worker: the jobs stay pending

	var jobs []venturi.Result
	for _, d := range []Digest{
		{UserID: 42, Items: []string{"a"}},                // inserted
		{UserID: 42, Items: []string{"b", "a"}},           // merged (With): a, b
		{UserID: 42, Items: []string{"b"}},                // kept: nothing new
		{UserID: 42, Items: []string{"c", "d"}},           // independent: a, b, c, d is too many
		{UserID: 42, Items: []string{"e"}, Rebuild: true}, // replaced: the newest pending digest
	} {
		res, err := q.Enqueue(ctx, d)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v %v\n", d.Items, res.Action)
		if !slices.ContainsFunc(jobs, func(r venturi.Result) bool { return r.ID == res.ID }) {
			jobs = append(jobs, res)
		}
	}

	// What the pending jobs hold now.
	for i, res := range jobs {
		job, err := q.Job(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		var d Digest
		if err := json.Unmarshal(job.Payload, &d); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d: %s, items %v\n", i+1, job.State, d.Items)
		printJournal(job)
	}
	// Output:
	// [a] inserted
	// [b a] merged
	// [b] kept
	// [c d] independent
	// [e] replaced
	// job 1: available, items [a b]
	//   merged: with
	//   merged: keep
	// job 2: available, items [e]
	//   merged: replace
}
