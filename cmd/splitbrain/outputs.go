package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitbrain/splitbrain/harness"
)

// maxParallel bounds matrix and validate --parallel: each run side by side
// has its own containers, network and address range on one engine, and on
// the 2-core machines of CI more than 3 already lengthens every run.
const maxParallel = 16

// checkOutputs makes sure each output of a matrix or validate can be
// written before the first run starts, so that a wrong path does not lose
// the table at the end: dir is the results directory, files the other
// outputs (--junit, --rates, --page) by flag; an empty path is skipped.
// Nothing is created.
func checkOutputs(dir string, files map[string]string) error {
	if err := harness.CheckWritableDir("--results", dir); err != nil {
		return err
	}
	for flag, path := range files {
		if path == "" {
			continue
		}
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return &usageError{fmt.Errorf("%s %s: is a directory (want a file path)", flag, path)}
		}
		if err := harness.CheckWritableDir(flag, filepath.Dir(path)); err != nil {
			return err
		}
	}
	return nil
}
