package runtime

import "strings"

// ShellQuote quotes s for a POSIX shell: words made only of safe characters are
// left as they are, anything else is put in single quotes (closing them,
// escaping and reopening them around each single quote inside). A shell
// parses the result back into exactly s (an SSH host's login shell, sh -c
// in a node), so no value is ever spliced into a command line unescaped.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !isSafe(c) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func isSafe(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.ContainsRune("@%+=:,./_-", c)
}

// ShellLine joins argv into one shell command line, every argument
// quoted: what an SSH "exec" request carries, or a script's line.
func ShellLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}
