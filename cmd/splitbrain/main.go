// Command splitbrain is a Jepsen-style fault-injection harness for
// distributed lock backends. See README.md.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
