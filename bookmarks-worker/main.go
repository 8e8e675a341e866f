// Command bookmarks-worker runs the bookmarks application's jobs: it fetches bookmarked
// pages (through an SSRF-guarded client), imports bookmark exports page by page and keeps
// the tag index. Configuration comes from the environment; see internal/config.
package main

import (
	"go.uber.org/fx"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/worker"
)

func main() {
	fx.New(worker.Options()).Run()
}
