// Command kindsgen writes kinds_gen.go: the task kinds of bench scenario 10 (many kinds),
// as distinct Go types for both libraries, the way an application declares its kinds
// (the generator is the package internal/kindsgen). Run it with `go generate` in bench/.
package main

import (
	"log"
	"os"

	"github.com/venturi-dev/bench/internal/kindsgen"
)

func main() {
	src, err := kindsgen.Source()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("kinds_gen.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
