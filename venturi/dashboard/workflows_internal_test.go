package dashboard

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestGraphLevels: a node is one level after the last of what it waits for: the nodes it
// needs, a group's members, a spawned node's spawner; nodes that wait for nothing are at
// level 0, and every edge goes left to right.
func TestGraphLevels(t *testing.T) {
	t.Parallel()
	id := ulid.Make()
	nodes := []venturi.NodeInfo{ // by name, as the API lists them
		{Name: "a", JobID: id},
		{Name: "b", JobID: id, Needs: []string{"a"}},
		{Name: "c", JobID: id, Needs: []string{"a"}},
		{Name: "d", JobID: id, Needs: []string{"b", "c", "rows"}},
		{Name: "rows", Group: true},
		{Name: "rows/1", JobID: id, In: "rows", Needs: []string{"b"}},
		{Name: "split", JobID: id},
		{Name: "split/0", JobID: id, In: "split"},
		{Name: "x", JobID: id, Needs: []string{"gone"}}, // a name not on the page: no edge
	}
	level, links := levels(nodes)
	for name, want := range map[string]int{"a": 0, "b": 1, "c": 1, "rows/1": 2, "rows": 3, "d": 4, "split": 0, "split/0": 1, "x": 0} {
		if level[name] != want {
			t.Errorf("level of %s = %d, want %d", name, level[name], want)
		}
	}
	classes := map[string]int{}
	for _, l := range links {
		classes[strings.Fields(l.class)[0]]++
		if level[l.from] >= level[l.to] {
			t.Errorf("edge %s -> %s goes from level %d to %d", l.from, l.to, level[l.from], level[l.to])
		}
	}
	if classes["needs"] != 6 || classes["member"] != 1 || classes["spawn"] != 1 {
		t.Errorf("edges by class %v", classes)
	}
	g := layout("/ops", nodes)
	if len(g.Nodes) != len(nodes) || len(g.Edges) != len(links) || g.W < 5*boxW || g.H < 3*boxH {
		t.Fatalf("layout: %d nodes, %d edges, %dx%d", len(g.Nodes), len(g.Edges), g.W, g.H)
	}
	for _, n := range g.Nodes {
		if n.X+n.W > g.W || n.Y+n.H > g.H {
			t.Errorf("node %s outside the graph", n.Node)
		}
		if n.Group != (n.URL == "") || (!n.Group && !strings.HasPrefix(n.URL, "/ops/jobs/")) {
			t.Errorf("node %s links %q", n.Node, n.URL)
		}
	}
	if layout("/ops", nil) != nil {
		t.Error("an empty workflow has a graph")
	}
}

// TestGraphNodeClass: a node is coloured by its outcome once it has one, else by its
// job's state.
func TestGraphNodeClass(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    venturi.NodeInfo
		want string
	}{
		{venturi.NodeInfo{Outcome: "ok", JobState: venturi.StateCompleted}, "ok"},
		{venturi.NodeInfo{Own: "dfail", JobState: venturi.StateCancelled}, "bad"},
		{venturi.NodeInfo{Outcome: "skip"}, "muted"},
		{venturi.NodeInfo{JobState: venturi.StateBlocked}, "blocked"},
		{venturi.NodeInfo{JobState: venturi.StateRunning}, "active"},
		{venturi.NodeInfo{Group: true}, "group"},
		{venturi.NodeInfo{JobState: venturi.StateScheduled}, "warn"},
	} {
		if got := nodeClass(tt.n); got != tt.want {
			t.Errorf("nodeClass(%+v) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
