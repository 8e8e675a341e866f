package tasks

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoWorkerDependencies proves the producer module stays free of worker dependencies:
// the API links this package, and a task payload must never drag in an HTTP client, a DI
// container or a web framework.
func TestNoWorkerDependencies(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"go.uber.org/fx", "go.uber.org/dig", // dependency injection belongs to the worker
		"github.com/labstack/echo", // the HTTP framework belongs to the API
		"net/http",                 // no HTTP client (nor server) in payloads
		"code.dny.dev/ssrf",        // the fetcher's guard belongs to the worker
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed nothing")
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("shared/tasks depends on %s (forbidden: %s)", dep, f)
			}
		}
	}
}
