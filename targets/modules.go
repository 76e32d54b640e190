package targets

import "runtime/debug"

// ModuleVersion is the version of the Go module path built into this
// binary ("v3.6.16"), or "" when the binary carries no module information
// or does not depend on it: how a recipe built on a library says which
// version it runs.
func ModuleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}
