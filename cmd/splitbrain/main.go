// Command splitbrain is a Jepsen-style fault-injection harness for
// distributed lock backends. See README.md.
package main

import (
	"os"

	// Every backend, lock client and fault we ship.
	_ "github.com/splitbrain/splitbrain/catalog"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
