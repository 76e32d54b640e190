package packet

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// RoundTrips opens one TCP connection from node n to addr, an HTTP server
// (the counter store answers GET /healthz), and times count requests on it,
// one after another, each waiting at most wait for its answer. It runs in
// n (bash, its /dev/tcp and $EPOCHREALTIME), so it measures exactly the
// path n's own connections take: through a proxy when n dials one. Each
// request leaves in one write (two would meet Nagle's algorithm and the
// peer's delayed ACK: 40 ms that are no fault's). A
// request that got no answer in time, or a connection the server side
// closed or reset, is an error naming which.
func RoundTrips(ctx context.Context, n runtime.Node, addr string, count int, wait time.Duration) ([]time.Duration, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("probe address %q: %w", addr, err)
	}
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s || { echo connect; exit 0; }
req=$'GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n'
answer() { while :; do IFS= read -r -t %s line <&3; rc=$?; [ $rc -eq 0 ] || return $rc; [ "$line" = $'\r' ] && return 0; done; }
for i in $(seq %d); do
  t0=$EPOCHREALTIME
  echo -n "$req" >&3 || { echo write; exit 0; }
  answer; rc=$?
  t1=$EPOCHREALTIME
  if [ $rc -gt 128 ]; then echo timeout; exit 0; elif [ $rc -ne 0 ]; then echo eof; exit 0; fi
  echo "ok $t0 $t1"
done`, host, port, seconds(wait), count)
	out, err := runtime.Run(ctx, n, "bash", "-c", script)
	if err != nil {
		return nil, fmt.Errorf("probe from %s: %w", n.Name(), err)
	}
	var rtts []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "ok" {
			return rtts, fmt.Errorf("probe from %s to %s: request %d: %s", n.Name(), addr, len(rtts)+1, line)
		}
		t0, err0 := parseEpoch(f[1])
		t1, err1 := parseEpoch(f[2])
		if err0 != nil || err1 != nil {
			return rtts, fmt.Errorf("probe from %s: bad times %q", n.Name(), line)
		}
		rtts = append(rtts, t1-t0)
	}
	return rtts, nil
}

// seconds formats d for bash's read -t.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// parseEpoch parses $EPOCHREALTIME ("1700000000.123456") as a duration
// since the epoch.
func parseEpoch(s string) (time.Duration, error) {
	sec, frac, _ := strings.Cut(s, ".")
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	frac = (frac + "000000")[:6]
	b, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(a)*time.Second + time.Duration(b)*time.Microsecond, nil
}
