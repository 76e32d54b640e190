package scenario

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MatrixFiles say where a finished matrix's files go: matrix.json under
// Results/matrix/SET-TIME/, and, when named, the JUnit XML and the table
// of pass rates (Markdown).
type MatrixFiles struct {
	Results, JUnit, Rates string
}

// JSONPath is where m's matrix.json goes under the results directory
// results: matrix/SET-TIME/matrix.json, TIME when the matrix started.
func (m *Matrix) JSONPath(results string) string {
	return filepath.Join(results, "matrix", fmt.Sprintf("%s-%s", m.Set.Name, m.Started.Format("20060102T150405Z")), "matrix.json")
}

// WriteFiles writes m's matrix.json and the files o names, saying where
// each went on w.
func (m *Matrix) WriteFiles(w io.Writer, o MatrixFiles) error {
	path := m.JSONPath(o.Results)
	if err := m.WriteJSON(path); err != nil {
		return err
	}
	fmt.Fprintf(w, "matrix: %s\n", path)
	if o.JUnit != "" {
		if err := m.WriteJUnit(o.JUnit); err != nil {
			return err
		}
	}
	if o.Rates != "" {
		var b strings.Builder
		if err := m.WriteRates(&b); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(o.Rates), 0o755); err != nil {
			return fmt.Errorf("write rates: %w", err)
		}
		if err := os.WriteFile(o.Rates, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write rates: %w", err)
		}
		fmt.Fprintf(w, "rates: %s\n", o.Rates)
	}
	return nil
}

// Mismatch is the one line a failing matrix ends with, wrapping
// ErrMismatch: how many cells failed and the first failing run's
// scenario, target, seed and what it missed. Nil when every cell passed.
func (m *Matrix) Mismatch() error {
	for _, c := range m.Cells {
		if c.Pass() {
			continue
		}
		for _, r := range m.Rows {
			if r.Scenario != c.Scenario || r.Target != c.Target || r.Seed != c.Seed || r.Pass() {
				continue
			}
			why := strings.Join(append(append([]string{}, r.Mismatches...), r.Error), "; ")
			short := ""
			if c.Runs > 1 {
				short = fmt.Sprintf(" (%d of %d runs passed, %d needed)", c.Passed, c.Runs, c.Need)
			}
			return fmt.Errorf("%w: %d of %d cells; first: %s on %s (seed %d)%s: %s",
				ErrMismatch, m.Failed(), len(m.Cells), r.Scenario, r.Target, r.Seed, short, strings.TrimSuffix(why, "; "))
		}
	}
	return nil
}
