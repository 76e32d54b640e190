package mariadb

import (
	"slices"
	"testing"

	"github.com/splitbrain/splitbrain/internal/option"
)

// TestDurabilitySetting: innodb_flush_log_at_trx_commit travels from the
// backend's options to the server's command line, after the default it
// overrides; a value InnoDB does not take is refused.
func TestDurabilitySetting(t *testing.T) {
	set, err := option.Parse(ServerSettings(), map[string]string{"innodb_flush_log_at_trx_commit": "2"}, "option", "target mariadb")
	if err != nil {
		t.Fatal(err)
	}
	cmd := Command("/splitbrain", Settings(set))
	if !slices.Contains(cmd, "innodb_flush_log_at_trx_commit=2") {
		t.Fatalf("command %q", cmd)
	}
	c := ServerConfig{DataDir: DataDir, Port: Port, Settings: Settings(set)}
	argv := c.Argv()
	def, set2 := slices.Index(argv, "--innodb-flush-log-at-trx-commit=1"), slices.Index(argv, "--innodb_flush_log_at_trx_commit=2")
	if def < 0 || set2 < def {
		t.Fatalf("argv %q: want the setting after the default", argv)
	}
	if _, err := option.Parse(ServerSettings(), map[string]string{"innodb_flush_log_at_trx_commit": "3"}, "option", "target mariadb"); err == nil {
		t.Fatal("innodb_flush_log_at_trx_commit=3 accepted")
	}
}
