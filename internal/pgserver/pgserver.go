// Package pgserver runs PostgreSQL 15 from Debian's packages as the main
// process of a node: it creates the database cluster in a state directory
// the first time (initdb), keeps it across kills and restarts, and replaces
// itself with the postmaster running as the postgres user (PostgreSQL
// refuses to run as root). The postgres lock backend and the postgres
// counter store both run it; [Probe] asks a running server for its health
// and version.
package pgserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Facts of the Debian packaging of PostgreSQL 15.
const (
	// DebianPackage is the server package (bookworm ships 15).
	DebianPackage = "postgresql-15"
	// BinDir holds initdb and postgres.
	BinDir = "/usr/lib/postgresql/15/bin"
	// OSUser is the account the package creates; the server runs as it.
	OSUser = "postgres"
	// Superuser is the database role initdb creates (trust authentication:
	// the run's network is the harness's own).
	Superuser = "postgres"
	// Database is the database clients use.
	Database = "postgres"
	// Port is the server's port.
	Port = 5432
	// DataDir is the default cluster directory (a state directory of the
	// node: a restarted node finds its data again).
	DataDir = "/var/lib/postgresql/splitbrain"
)

// Packages are the Debian packages a node running PostgreSQL needs.
var Packages = []string{DebianPackage}

// Config is one server's configuration.
type Config struct {
	// DataDir is the cluster directory.
	DataDir string
	// Port is the port to listen on (every address).
	Port int
	// Settings are server settings passed as -c NAME=VALUE, after the
	// defaults of [Config.Argv] (so they win).
	Settings map[string]string
}

// DefaultConfig is the server splitbrain runs: durable commits (fsync and
// synchronous_commit on, PostgreSQL's defaults), small memory, connections
// and disconnections logged (the log shows when the server noticed a client
// gone).
func DefaultConfig() Config {
	return Config{DataDir: DataDir, Port: Port, Settings: map[string]string{}}
}

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

// Validate returns the first problem with the configuration.
func (c Config) Validate() error {
	switch {
	case !filepath.IsAbs(c.DataDir):
		return fmt.Errorf("--data-dir %q: want an absolute path", c.DataDir)
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("--port %d: want 1..65535", c.Port)
	}
	for k, v := range c.Settings {
		if !settingName.MatchString(k) || strings.ContainsAny(v, "\n\x00") {
			return fmt.Errorf("--set %s=%q: want a setting name and a one-line value", k, v)
		}
	}
	return nil
}

// Argv is the postmaster's command line.
func (c Config) Argv() []string {
	argv := []string{filepath.Join(BinDir, "postgres"), "-D", c.DataDir,
		"-c", "listen_addresses=*",
		"-c", "port=" + strconv.Itoa(c.Port),
		"-c", "unix_socket_directories=/tmp",
		"-c", "shared_buffers=16MB",
		"-c", "max_connections=100",
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		// Crash recovery first syncs the data directory; one syncfs(2)
		// instead of an fsync per file (4 s under load) makes a killed
		// server serve again within about a second.
		"-c", "recovery_init_sync_method=syncfs",
		"-c", "log_connections=on",
		"-c", "log_disconnections=on",
		"-c", "log_line_prefix=%m [%p] %a ",
		"-c", "logging_collector=off",
	}
	keys := make([]string, 0, len(c.Settings))
	for k := range c.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		argv = append(argv, "-c", k+"="+c.Settings[k])
	}
	return argv
}

// HBA is the cluster's pg_hba.conf: trust from anywhere (the run's private
// network, test traffic only).
const HBA = "local all all trust\nhost all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n"

// account is the uid and gid of OSUser.
func account() (uint32, uint32, error) {
	u, err := user.Lookup(OSUser)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres account: %w (is %s installed?)", err, DebianPackage)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("postgres account: %w", err)
	}
	return uint32(uid), uint32(gid), nil
}

// Prepare creates the cluster when DataDir holds none (initdb, as the
// postgres user), and writes pg_hba.conf; a cluster already there (a
// restarted node) is kept as it is. A directory left half-initialised by a
// kill during initdb is emptied and initialised again.
func (c Config) Prepare(ctx context.Context, log *slog.Logger) error {
	uid, gid, err := account()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("postgres data dir: %w", err)
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		ents, err := os.ReadDir(c.DataDir)
		if err != nil {
			return fmt.Errorf("postgres data dir: %w", err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(c.DataDir, e.Name())); err != nil {
				return fmt.Errorf("postgres data dir: %w", err)
			}
		}
		if err := os.Chown(c.DataDir, int(uid), int(gid)); err != nil {
			return fmt.Errorf("postgres data dir: %w", err)
		}
		if err := os.Chmod(c.DataDir, 0o700); err != nil {
			return fmt.Errorf("postgres data dir: %w", err)
		}
		cmd := exec.CommandContext(ctx, filepath.Join(BinDir, "initdb"), "-D", c.DataDir, "-U", Superuser,
			"--auth=trust", "--encoding=UTF8", "--locale=C")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
		}
		log.Info("postgres cluster created", "dir", c.DataDir)
	} else if err != nil {
		return fmt.Errorf("postgres data dir: %w", err)
	}
	hba := filepath.Join(c.DataDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte(HBA), 0o600); err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	return os.Chown(hba, int(uid), int(gid))
}

// Exec replaces the calling process with the postmaster, running as the
// postgres user: PostgreSQL is then the node's main process, which a pause
// freezes and a kill kills.
func (c Config) Exec(log *slog.Logger) error {
	uid, gid, err := account()
	if err != nil {
		return err
	}
	if err := syscall.Setgroups([]int{int(gid)}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(gid)); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(int(uid)); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	argv := c.Argv()
	log.Info("exec postgres", "argv", argv)
	env := []string{"PATH=/usr/bin:/bin", "LANG=C", "HOME=/var/lib/postgresql"}
	if err := syscall.Exec(argv[0], argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	return nil
}

// settingsFlag parses repeated --set NAME=VALUE.
type settingsFlag map[string]string

func (s settingsFlag) String() string {
	out := make([]string, 0, len(s))
	for k, v := range s {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (s settingsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--set %q: want NAME=VALUE", v)
	}
	s[k] = val
	return nil
}

// Flags registers a server program's flags on fs and returns the check of
// their values and the program: Prepare, then Exec.
func Flags(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
	c := DefaultConfig()
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "cluster directory (created by initdb when empty, kept across restarts)")
	fs.IntVar(&c.Port, "port", c.Port, "port")
	fs.Var(settingsFlag(c.Settings), "set", "server setting NAME=VALUE (repeatable), passed as -c")
	return func() error { return c.Validate() }, func(ctx context.Context, log *slog.Logger) error {
		if err := c.Prepare(ctx, log); err != nil {
			return err
		}
		return c.Exec(log)
	}
}

// Command is a node's main process running the server program called
// program (`splitbrain <program> --set ...`) of the splitbrain binary at
// self, with settings.
func Command(self, program string, settings map[string]string) []string {
	cmd := []string{self, program, "--data-dir", DataDir}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cmd = append(cmd, "--set", k+"="+settings[k])
	}
	return cmd
}

// ConnString is the connection string of the server at endpoint
// ("host:port") for the client called app, with extra run-time
// parameters (idle_session_timeout, say).
func ConnString(endpoint, app string) string {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		host, port = endpoint, strconv.Itoa(Port)
	}
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable application_name=%s", host, port, Superuser, Database, app)
}

// Status is what the health probe reports.
type Status struct {
	Serving bool `json:"serving"`
	// Version is server_version ("15.14 (Debian 15.14-0+deb12u1)").
	Version string `json:"version"`
	// Recovery is pg_is_in_recovery(): true while replaying WAL.
	Recovery bool `json:"recovery"`
	// Started is pg_postmaster_start_time(), which a restart moves.
	Started time.Time `json:"started"`
}

// Probe connects to the server at endpoint and asks for its status.
func Probe(ctx context.Context, endpoint string) (Status, error) {
	cfg, err := pgx.ParseConfig(ConnString(endpoint, "splitbrain-probe"))
	if err != nil {
		return Status{}, fmt.Errorf("postgres probe: %w", err)
	}
	cfg.ConnectTimeout = 2 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return Status{}, fmt.Errorf("postgres probe: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s Status
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), pg_is_in_recovery(), pg_postmaster_start_time()").Scan(&s.Version, &s.Recovery, &s.Started); err != nil {
		return Status{}, fmt.Errorf("postgres probe: %w", err)
	}
	s.Serving = !s.Recovery
	return s, nil
}
