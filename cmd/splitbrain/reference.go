package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// referenceDir is where the generated CLI reference is kept, relative to
// the repository's root; a test fails when it is stale.
const referenceDir = "docs/cli"

// regenerateReference is the command that rewrites the reference.
const regenerateReference = "go run ./cmd/splitbrain reference --dir " + referenceDir

// newReferenceCmd writes the CLI reference from the commands themselves:
// one Markdown page per command (docs/cli/ in the repository), and with
// --man, man pages.
func newReferenceCmd(_ *globalFlags) *cobra.Command {
	var dir, man string
	cmd := &cobra.Command{
		Use:    "reference",
		Short:  "Write the CLI reference: a Markdown page per command, and man pages with --man",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			root := cmd.Root()
			if err := writeReference(root, dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reference: %s\n", dir)
			if man != "" {
				if err := os.MkdirAll(man, 0o755); err != nil {
					return err
				}
				if err := doc.GenManTree(root, &doc.GenManHeader{Title: "SPLITBRAIN", Section: "1", Source: "splitbrain"}, man); err != nil {
					return fmt.Errorf("man pages: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "man pages: %s\n", man)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", referenceDir, "directory of the Markdown pages (its *.md files are replaced)")
	cmd.Flags().StringVar(&man, "man", "", "also write man pages to this directory")
	return cmd
}

// writeReference replaces the Markdown pages in dir with those of root's
// commands, so that a removed command's page goes too.
func writeReference(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "splitbrain*.md"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("reference: %w", err)
		}
	}
	root.DisableAutoGenTag = true // no date: the pages change only when the commands do
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	return nil
}
