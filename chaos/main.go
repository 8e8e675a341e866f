// Command chaos is venturi's fault-injection suite.
//
//	chaos [run] [-short] [-control] [-seed N]   drive a chaos run (the default subcommand)
//	chaos worker -n N                            one worker process (started by the driver)
//
// See README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "worker") {
		cmd, args = args[0], args[1:]
	}
	var err error
	code := 0
	switch cmd {
	case "worker":
		err = workerMain(args)
	default:
		code, err = driverMain(args)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos %s: %v\n", cmd, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
