package zookeeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Status is one member's answer to the `srvr` four-letter word, as
// `splitbrain probe zookeeper` prints it.
type Status struct {
	// Version is the server's release ("3.8.0"), from its version line
	// ("3.8.0-<commit>, built on ...").
	Version string `json:"version"`
	// Mode is "leader", "follower", "observer" or "standalone"; empty
	// when the member does not serve (no quorum).
	Mode string `json:"mode"`
	// Zxid is the member's last processed transaction id: its epoch in
	// the high 32 bits, a counter in the low ones.
	Zxid uint64 `json:"zxid"`
	// Serving is false when the member answered that it is not serving
	// requests (it has no quorum, or it is still syncing).
	Serving bool `json:"serving"`
}

// Epoch is the leader epoch of the member's last transaction.
func (s Status) Epoch() uint64 { return s.Zxid >> 32 }

// notServing is what a member without quorum answers to a four-letter
// word.
const notServing = "not currently serving requests"

// ParseSrvr reads a `srvr` answer.
func ParseSrvr(out string) (Status, error) {
	if strings.Contains(out, notServing) {
		return Status{}, nil
	}
	if strings.Contains(out, "is not executed because it is not in the whitelist") {
		return Status{}, fmt.Errorf("srvr refused: %s", strings.TrimSpace(out))
	}
	var (
		s          Status
		sawVersion bool
	)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Zookeeper version":
			v, _, _ = strings.Cut(v, ",")
			s.Version, _, _ = strings.Cut(v, "-")
			sawVersion = true
		case "Mode":
			s.Mode = v
		case "Zxid":
			z, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			if err != nil {
				return Status{}, fmt.Errorf("srvr: zxid %q: %w", v, err)
			}
			s.Zxid = z
		}
	}
	if !sawVersion || s.Mode == "" {
		return Status{}, fmt.Errorf("srvr: unexpected answer %q", out)
	}
	s.Serving = true
	return s, nil
}

// FourLetter sends a four-letter word (srvr, ruok, mntr...) to the member
// at endpoint and returns its whole answer; the member must whitelist the
// word (4lw.commands.whitelist).
func FourLetter(ctx context.Context, endpoint, word string) (string, error) {
	if len(word) != 4 {
		return "", fmt.Errorf("four-letter word %q", word)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return "", fmt.Errorf("zookeeper %s: %w", word, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	}
	if _, err := io.WriteString(conn, word); err != nil {
		return "", fmt.Errorf("zookeeper %s: %w", word, err)
	}
	b, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("zookeeper %s: %w", word, err)
	}
	return string(b), nil
}

// Probe asks the member at endpoint for its status (run inside a node).
func Probe(ctx context.Context, endpoint string) (Status, error) {
	out, err := FourLetter(ctx, endpoint, "srvr")
	if err != nil {
		return Status{}, err
	}
	return ParseSrvr(out)
}
