package mariadb

import (
	"context"
	"database/sql"
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

	"github.com/go-sql-driver/mysql"
)

// Facts of Debian bookworm's MariaDB packaging and of the server
// splitbrain runs.
const (
	// DebianPackage is the server package (bookworm ships 10.11).
	DebianPackage = "mariadb-server"
	// Server is the server binary, and InstallDB the program that creates
	// its system tables.
	Server    = "/usr/sbin/mariadbd"
	InstallDB = "/usr/bin/mariadb-install-db"
	// OSUser is the account the package creates; the server drops to it.
	OSUser = "mysql"
	// User is the account clients use (no password: the run's network is
	// the harness's own), Database their database, Fence the table of the
	// fencing counter in it (one InnoDB row).
	User     = "splitbrain"
	Database = "splitbrain"
	Fence    = "splitbrain_fence"
	// Port is the server's port.
	Port = 3306
	// DataDir is the node's state directory (the server's datadir: a
	// restarted node finds its data and redo log again).
	DataDir = "/var/lib/mysql-splitbrain"
	// RunDir holds the server's socket and pid file.
	RunDir = "/run/mysqld"
)

// ready marks a data directory whose system tables were created whole: a
// node killed during mariadb-install-db starts again from an empty one.
const ready = ".splitbrain-installed"

// InitSQL runs at every start of the server (--init-file), before it
// accepts connections: the clients' account, database and fencing
// counter, created once. The counter is a row of an ordinary InnoDB table,
// not a SEQUENCE: MariaDB 10.11's sequences hand out values again after a
// SIGKILL of the server (docs/mariadb.md), while a committed row change is
// in the redo log, flushed at every commit.
const InitSQL = `CREATE DATABASE IF NOT EXISTS ` + Database + `;
CREATE USER IF NOT EXISTS '` + User + `'@'%';
GRANT ALL PRIVILEGES ON *.* TO '` + User + `'@'%';
CREATE TABLE IF NOT EXISTS ` + Database + `.` + Fence + ` (id TINYINT PRIMARY KEY, v BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB;
INSERT IGNORE INTO ` + Database + `.` + Fence + ` VALUES (1, 0);
`

// TakeToken takes the next fencing token in the session that holds the
// lock, in a transaction of its own (autocommit): the row's new value is in
// the redo log, flushed at commit, before the token is used; SELECT
// LAST_INSERT_ID() in the same session reads it back.
const TakeToken = "UPDATE " + Database + "." + Fence + " SET v = LAST_INSERT_ID(v + 1) WHERE id = 1"

// ServerConfig is one server's configuration.
type ServerConfig struct {
	DataDir string
	Port    int
	// Settings are server system variables passed as --NAME=VALUE after
	// the defaults of Argv (so they win).
	Settings map[string]string
}

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Validate returns the first problem with c.
func (c ServerConfig) Validate() error {
	switch {
	case !filepath.IsAbs(c.DataDir):
		return fmt.Errorf("--data-dir %q: want an absolute path", c.DataDir)
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("--port %d: want 1..65535", c.Port)
	}
	for k, v := range c.Settings {
		if !settingName.MatchString(k) || strings.ContainsAny(v, "\n\x00 ") {
			return fmt.Errorf("--set %s=%q: want a variable name and a one-word value", k, v)
		}
	}
	return nil
}

// initFile is where the server's init file is written.
func (c ServerConfig) initFile() string { return filepath.Join(c.DataDir, "splitbrain-init.sql") }

// Argv is the server's command line. It reads no option file (Debian's
// /etc/mysql is not consulted): every setting is here. Commits are durable
// (the redo log flushed at every commit, InnoDB's default), aborted and
// timed-out connections are logged (the node's log shows when the server
// noticed a client gone).
func (c ServerConfig) Argv() []string {
	argv := []string{Server, "--no-defaults",
		"--user=" + OSUser,
		"--datadir=" + c.DataDir,
		"--port=" + strconv.Itoa(c.Port),
		"--bind-address=0.0.0.0",
		"--socket=" + filepath.Join(RunDir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(RunDir, "mysqld.pid"),
		"--skip-name-resolve",
		"--init-file=" + c.initFile(),
		"--innodb-flush-log-at-trx-commit=1",
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--innodb-use-native-aio=0",
		"--performance-schema=0",
		"--log-warnings=3",
	}
	keys := make([]string, 0, len(c.Settings))
	for k := range c.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		argv = append(argv, "--"+k+"="+c.Settings[k])
	}
	return argv
}

// account is the uid and gid of OSUser.
func account() (int, int, error) {
	u, err := user.Lookup(OSUser)
	if err != nil {
		return 0, 0, fmt.Errorf("mariadb account: %w (is %s installed?)", err, DebianPackage)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("mariadb account: %w", err)
	}
	return uid, gid, nil
}

// Prepare creates the system tables when the data directory has none
// (mariadb-install-db), and writes the init file; a data directory already
// there (a restarted node) is kept as it is.
func (c ServerConfig) Prepare(ctx context.Context, log *slog.Logger) error {
	uid, gid, err := account()
	if err != nil {
		return err
	}
	for _, d := range []string{c.DataDir, RunDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("mariadb: %w", err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("mariadb: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, ready)); errors.Is(err, os.ErrNotExist) {
		ents, err := os.ReadDir(c.DataDir)
		if err != nil {
			return fmt.Errorf("mariadb data dir: %w", err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(c.DataDir, e.Name())); err != nil {
				return fmt.Errorf("mariadb data dir: %w", err)
			}
		}
		cmd := exec.CommandContext(ctx, InstallDB, "--no-defaults", "--user="+OSUser, "--datadir="+c.DataDir,
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mariadb-install-db: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if err := os.WriteFile(filepath.Join(c.DataDir, ready), nil, 0o644); err != nil {
			return fmt.Errorf("mariadb data dir: %w", err)
		}
		log.Info("mariadb system tables created", "dir", c.DataDir)
	} else if err != nil {
		return fmt.Errorf("mariadb data dir: %w", err)
	}
	if err := os.WriteFile(c.initFile(), []byte(InitSQL), 0o644); err != nil {
		return fmt.Errorf("mariadb init file: %w", err)
	}
	return nil
}

// Exec replaces the calling process with the server (which drops to the
// mysql account itself): MariaDB is then the node's main process, which a
// pause freezes and a kill kills.
func (c ServerConfig) Exec(log *slog.Logger) error {
	argv := c.Argv()
	log.Info("exec mariadbd", "argv", argv)
	if err := syscall.Exec(argv[0], argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "HOME=/var/lib/mysql"}); err != nil {
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

// ServerFlags registers the server program's flags on fs and returns the
// check of their values and the program: Prepare, then Exec.
func ServerFlags(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
	c := ServerConfig{DataDir: DataDir, Port: Port, Settings: map[string]string{}}
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "data directory (system tables created when empty, kept across restarts)")
	fs.IntVar(&c.Port, "port", c.Port, "port")
	fs.Var(settingsFlag(c.Settings), "set", "server variable NAME=VALUE (repeatable), passed as --NAME=VALUE")
	return func() error { return c.Validate() }, func(ctx context.Context, log *slog.Logger) error {
		if err := c.Prepare(ctx, log); err != nil {
			return err
		}
		return c.Exec(log)
	}
}

// Command is a node's main process (`splitbrain mariadb --set ...`) of the
// splitbrain binary at self, with settings.
func Command(self string, settings map[string]string) []string {
	cmd := []string{self, ProgramName, "--data-dir", DataDir}
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

// ConnConfig is the driver's configuration for the server at endpoint
// ("host:port"), with session variables params (wait_timeout, say).
func ConnConfig(endpoint string, params map[string]string) *mysql.Config {
	c := mysql.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = User, "tcp", endpoint, Database
	c.Timeout = 2 * time.Second
	c.Params = params
	if _, _, err := net.SplitHostPort(endpoint); err != nil {
		c.Addr = net.JoinHostPort(endpoint, strconv.Itoa(Port))
	}
	return c
}

// Status is what the health probe reports.
type Status struct {
	Serving bool `json:"serving"`
	// Version is VERSION() ("10.11.11-MariaDB-0+deb12u1").
	Version string `json:"version"`
	// Uptime is the server's uptime in seconds (a restart resets it).
	Uptime int64 `json:"uptime_s"`
	// Fence says the fencing counter's row exists.
	Fence bool `json:"fence"`
}

// Probe connects to the server at endpoint and asks for its status.
func Probe(ctx context.Context, endpoint string) (Status, error) {
	conn, err := mysql.NewConnector(ConnConfig(endpoint, nil))
	if err != nil {
		return Status{}, fmt.Errorf("mariadb probe: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var s Status
	var n int
	err = db.QueryRowContext(ctx, `SELECT VERSION(),
		(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'),
		(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?)`, Database, Fence).
		Scan(&s.Version, &s.Uptime, &n)
	if err != nil {
		return Status{}, fmt.Errorf("mariadb probe: %w", err)
	}
	s.Fence = n == 1
	s.Serving = s.Fence
	return s, nil
}
