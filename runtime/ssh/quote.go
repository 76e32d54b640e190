package ssh

// shArgv runs script with sh, its arguments passed as $1, $2, ... so that
// no value is ever spliced into the script itself.
func shArgv(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

// Scripts run on the hosts. Each takes its values as positional arguments.
const (
	// startScript starts a daemon: $1 node directory, $2 log file, $3 settle
	// time (seconds), $4 directories to create (newline separated), $5 the
	// program to look for, then the command. It prints the daemon's pid once
	// the daemon has survived the settle time; exit 127 means the program is
	// missing, 3 that it died at once (its log's tail on stderr).
	startScript = `set -e
dir=$1; log=$2; settle=$3; mkdirs=$4; prog=$5; shift 5
command -v "$prog" >/dev/null 2>&1 || { echo "$prog: not installed" >&2; exit 127; }
mkdir -p "$dir"
printf '%s\n' "$mkdirs" | while IFS= read -r d; do [ -z "$d" ] || mkdir -p "$d"; done
cd "$dir"
rm -f pid pid.tmp
setsid -f sh -c 'echo $$ > pid.tmp && mv pid.tmp pid && exec "$@"' sh "$@" </dev/null >>"$log" 2>&1
i=0
while [ ! -s pid ]; do
  i=$((i+1)); [ "$i" -le 1000 ] || { echo "no pid file after 10s" >&2; exit 1; }
  sleep 0.01
done
pid=$(cat pid)
sleep "$settle"
if ! grep -q '^State:[[:space:]]*[^Z[:space:]]' "/proc/$pid/status" 2>/dev/null; then
  echo "exited at once; the end of its log:" >&2; tail -n 20 "$log" >&2; exit 3
fi
echo "$pid"`

	// prepareScript creates an interactive node's directory: $1 the
	// directory, $2 the owner (uid, empty for no change), $3 state
	// directories (newline separated).
	prepareScript = `set -e
mkdir -p "$1"
printf '%s\n' "$3" | while IFS= read -r d; do [ -z "$d" ] || mkdir -p "$d"; done
[ -z "$2" ] || chown "$2" "$1"`

	// consoleScript runs an interactive node's command with the session's
	// stdin and stdout: $1 node directory, $2 log file, $3 the program to
	// look for, then the command. It prints its pid first (the pid the
	// command keeps, as it is exec'd).
	consoleScript = `cd "$1" || exit 1
log=$2; prog=$3; shift 3
command -v "$prog" >/dev/null 2>&1 || { echo "$prog: not installed" >&2; exit 127; }
echo $$ > pid
echo $$
exec "$@" 2>>"$log"`

	// aliveScript exits 0 when process $1 exists and is not a zombie.
	aliveScript = `grep -q '^State:[[:space:]]*[^Z[:space:]]' "/proc/$1/status" 2>/dev/null`

	// signalScript sends signal $1 (a name) to process $2.
	signalScript = `kill -s "$1" "$2"`

	// groupSignalScript sends signal $1 (a name) to process $2 and every
	// descendant of it, parents first; after CONT it checks that none of
	// them is still stopped.
	groupSignalScript = `sig=$1; pids=$2; todo=$2
while [ -n "$todo" ]; do
  next=""
  for p in $todo; do next="$next $(pgrep -P "$p" | tr '\n' ' ')"; done
  todo=$(echo $next); pids="$pids $todo"
done
kill -s "$sig" $pids || exit 1
[ "$sig" = CONT ] || exit 0
for p in $pids; do
  if grep -q '^State:[[:space:]]*T' "/proc/$p/status" 2>/dev/null; then echo "process $p is still stopped after SIGCONT" >&2; exit 1; fi
done`

	// uploadScript writes stdin to $1 through a temporary file, sets mode
	// $2 and prints the file's SHA-256.
	uploadScript = `set -e
dst=$1; mode=$2
mkdir -p "$(dirname "$dst")"
tmp="$dst.upload.$$"
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
chmod "$mode" "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
sha256sum "$dst" | cut -d' ' -f1`

	// preflightScript prints the uid, the machine and whether setsid can
	// fork (util-linux 2.31 or later).
	preflightScript = `id -u; uname -m; if setsid -f true >/dev/null 2>&1; then echo setsid; else echo no-setsid; fi`

	// cleanupScript removes one run from a host: $1 the chain, $2 run
	// directory, $3 binary directory, $4 verify (1: fail if anything of
	// ours is left). It kills every process whose pid file is under the run
	// directory (and whose working directory is still there, against reused
	// pids) with its process group, removes the chain and both directories,
	// and removes their parents when empty.
	cleanupScript = `chain=$1; run=$2; bin=$3; verify=$4
ours() { # pid dir
  cwd=$(readlink "/proc/$1/cwd" 2>/dev/null) || return 1
  case "$cwd" in "$2"|"$2"/*|"$2 (deleted)"|"$2/"*" (deleted)") return 0;; esac
  return 1
}
pids=""
for f in "$run"/*/pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f" 2>/dev/null) || continue
  case "$p" in ''|*[!0-9]*) continue;; esac
  d=$(dirname "$f")
  ours "$p" "$d" && pids="$pids $p"
done
for p in $pids; do
  kill -s CONT "$p" 2>/dev/null
  kill -s KILL -- "-$p" 2>/dev/null
  kill -s KILL "$p" 2>/dev/null
done
alive() { grep -q '^State:[[:space:]]*[^Z[:space:]]' "/proc/$1/status" 2>/dev/null; }
i=0
while :; do
  left=""
  for p in $pids; do alive "$p" && left="$left $p"; done
  [ -n "$left" ] || break
  i=$((i+1)); [ "$i" -le 500 ] || break
  sleep 0.01
done
if command -v iptables >/dev/null 2>&1; then
  while iptables -w -D INPUT -j "$chain" 2>/dev/null; do :; done
  iptables -w -F "$chain" 2>/dev/null || true
  iptables -w -X "$chain" 2>/dev/null || true
fi
rm -rf -- "$run" "$bin"
rmdir -- "$(dirname "$run")" "$(dirname "$bin")" 2>/dev/null || true
[ "$verify" = 1 ] || exit 0
status=0
[ -z "$left" ] || { echo "processes still alive:$left" >&2; status=1; }
for d in "$run" "$bin"; do [ ! -e "$d" ] || { echo "$d still exists" >&2; status=1; }; done
if command -v iptables >/dev/null 2>&1 && iptables -w -S 2>/dev/null | grep -q -- "$chain"; then
  echo "iptables chain $chain still present" >&2; status=1
fi
exit $status`
)
