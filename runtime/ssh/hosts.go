package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Host roles. A host without roles has every role.
const (
	// RoleClient marks hosts for the counter store and the client agents
	// that have no host of their own.
	RoleClient = "client"
	// RoleNode marks hosts for lock-service nodes (n1, n2, ...) that have no
	// host of their own.
	RoleNode = "node"
)

// DefaultUser is the login user when none is given.
const DefaultUser = "root"

// DefaultPort is SSH's port.
const DefaultPort = 22

// Host is one machine of the test, as the hosts file describes it.
type Host struct {
	// Name identifies the host. A logical node of the same name (n1, store,
	// c3) runs on it.
	Name string `yaml:"name" json:"name"`
	// Address is where SSH reaches the host: an IP address or a DNS name.
	Address string `yaml:"address" json:"address"`
	// Port is SSH's port (22 when zero).
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// User is the login user (root when empty). Other users need
	// passwordless sudo.
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Role and Roles say which unplaced nodes the host may take
	// (RoleClient, RoleNode); none means every role.
	Role  string   `yaml:"role,omitempty" json:"role,omitempty"`
	Roles []string `yaml:"roles,omitempty" json:"roles,omitempty"`
	// Nodes names further logical nodes placed on this host.
	Nodes []string `yaml:"nodes,omitempty" json:"nodes,omitempty"`
	// TestAddress is the address other nodes reach this host at, when it
	// differs from Address (a separate management network).
	TestAddress string `yaml:"test_address,omitempty" json:"test_address,omitempty"`
	// Auth overrides the file's and the command line's authentication.
	Auth *Auth `yaml:"auth,omitempty" json:"auth,omitempty"`
}

// Auth says how to log in. Methods are tried in order: keys (the key file,
// then the agent's keys), then the password.
type Auth struct {
	// Key is a private key file (unencrypted; load passphrase-protected
	// keys into ssh-agent instead). "~/" is the home directory.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Agent uses the ssh-agent at $SSH_AUTH_SOCK.
	Agent bool `yaml:"agent,omitempty" json:"agent,omitempty"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password_env,omitempty" json:"password_env,omitempty"`
	// Password is the password itself (prefer PasswordEnv: a file with a
	// password in it must not be world-readable).
	Password string `yaml:"password,omitempty" json:"password,omitempty"`
}

func (a *Auth) empty() bool {
	return a == nil || (a.Key == "" && !a.Agent && a.PasswordEnv == "" && a.Password == "")
}

// HostsFile is the hosts file: defaults for every host, and the hosts.
type HostsFile struct {
	// Defaults fills in the port, user and auth of hosts that leave them
	// out.
	Defaults struct {
		Port int    `yaml:"port,omitempty"`
		User string `yaml:"user,omitempty"`
		Auth *Auth  `yaml:"auth,omitempty"`
	} `yaml:"defaults,omitempty"`
	Hosts []Host `yaml:"hosts"`
}

// LoadHostsFile reads and checks a hosts file (YAML).
func LoadHostsFile(path string) ([]Host, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read hosts file: %w", err)
	}
	hosts, err := ParseHosts(b)
	if err != nil {
		return nil, fmt.Errorf("hosts file %s: %w", path, err)
	}
	return hosts, nil
}

// ParseHosts parses a hosts file's contents, applies its defaults and
// checks the hosts.
func ParseHosts(b []byte) ([]Host, error) {
	var f HostsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	for i := range f.Hosts {
		h := &f.Hosts[i]
		if h.Port == 0 {
			h.Port = f.Defaults.Port
		}
		if h.User == "" {
			h.User = f.Defaults.User
		}
		if h.Auth.empty() && f.Defaults.Auth != nil {
			a := *f.Defaults.Auth
			h.Auth = &a
		}
	}
	if err := CheckHosts(f.Hosts); err != nil {
		return nil, err
	}
	return f.Hosts, nil
}

// ParseNodeList parses --nodes: a comma-separated list of
// [user@]host[:port] (IPv6 addresses in brackets when a port follows).
// The hosts are named n1, n2, ... in order, so lock node n<i> runs on the
// i-th; the store and clients are spread over all of them.
func ParseNodeList(list string) ([]Host, error) {
	var hosts []Host
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("--nodes %q: empty entry %d", list, i+1)
		}
		h := Host{Name: "n" + strconv.Itoa(i+1)}
		rest := item
		if at := strings.LastIndexByte(item, '@'); at >= 0 {
			h.User, rest = item[:at], item[at+1:]
			if h.User == "" {
				return nil, fmt.Errorf("--nodes: %q: empty user before @", item)
			}
		}
		host, port, err := splitHostPort(rest)
		if err != nil {
			return nil, fmt.Errorf("--nodes: %q: %w", item, err)
		}
		h.Address, h.Port = host, port
		hosts = append(hosts, h)
	}
	if err := CheckHosts(hosts); err != nil {
		return nil, err
	}
	return hosts, nil
}

// splitHostPort splits host[:port], [v6]:port and a bare v6 address.
func splitHostPort(s string) (string, int, error) {
	switch {
	case strings.HasPrefix(s, "["):
		if strings.HasSuffix(s, "]") {
			return s[1 : len(s)-1], 0, nil
		}
		host, p, err := net.SplitHostPort(s)
		if err != nil {
			return "", 0, err
		}
		port, err := parsePort(p)
		return host, port, err
	case strings.Count(s, ":") == 1:
		host, p, _ := strings.Cut(s, ":")
		port, err := parsePort(p)
		return host, port, err
	default:
		return s, 0, nil // a name, an IPv4 address or a bare IPv6 address
	}
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bad port %q", p)
	}
	return n, nil
}

// CheckHosts checks that every host has a name and an address, that names
// and placed nodes are unique and that roles are known; it fills in the
// default port and user.
func CheckHosts(hosts []Host) error {
	if len(hosts) == 0 {
		return errors.New("no hosts")
	}
	seen := map[string]string{}
	claim := func(node, host string) error {
		if other, ok := seen[node]; ok {
			return fmt.Errorf("node %q is placed on both host %q and host %q", node, other, host)
		}
		seen[node] = host
		return nil
	}
	for i := range hosts {
		h := &hosts[i]
		if h.Name == "" {
			return fmt.Errorf("host %d (%s) has no name", i+1, h.Address)
		}
		if h.Address == "" {
			return fmt.Errorf("host %q has no address", h.Name)
		}
		if h.Port == 0 {
			h.Port = DefaultPort
		}
		if h.Port < 0 || h.Port > 65535 {
			return fmt.Errorf("host %q: bad port %d", h.Name, h.Port)
		}
		if h.User == "" {
			h.User = DefaultUser
		}
		if err := claim(h.Name, h.Name); err != nil {
			return err
		}
		for _, n := range h.Nodes {
			if err := claim(n, h.Name); err != nil {
				return err
			}
		}
		for _, r := range h.roles() {
			if r != RoleClient && r != RoleNode {
				return fmt.Errorf("host %q: unknown role %q (known: %s, %s)", h.Name, r, RoleClient, RoleNode)
			}
		}
	}
	return nil
}

func (h *Host) roles() []string {
	out := slices.Clone(h.Roles)
	if h.Role != "" && !slices.Contains(out, h.Role) {
		out = append(out, h.Role)
	}
	return out
}

// HasRole reports whether h takes unplaced nodes of role (a host without
// roles has every role).
func (h *Host) HasRole(role string) bool {
	rs := h.roles()
	return len(rs) == 0 || slices.Contains(rs, role)
}

func (h *Host) carries(node string) bool {
	return h.Name == node || slices.Contains(h.Nodes, node)
}

var (
	clientName   = regexp.MustCompile(`^c([0-9]+)$`)
	lockNodeName = regexp.MustCompile(`^n[0-9]+$`)
)

// Place chooses the host of each logical node, given the nodes placed so
// far (node → host index):
//
//   - a node whose name is a host's name, or in a host's nodes list, runs
//     there;
//   - the store and client c<k> go round-robin (the store first, then c1,
//     c2, ...) over the hosts with role client, or over all hosts when none
//     has it;
//   - any other node (a lock node n<k>) goes to the first host that
//     carries no lock node yet, among those with role node, else among
//     those without roles.
//
// Co-located nodes share their host's address.
func Place(hosts []Host, node string, placed map[string]int) (int, error) {
	for i := range hosts {
		if hosts[i].carries(node) {
			return i, nil
		}
	}
	if node == "store" || clientName.MatchString(node) {
		var pool []int
		for i := range hosts {
			if slices.Contains(hosts[i].roles(), RoleClient) {
				pool = append(pool, i)
			}
		}
		if len(pool) == 0 {
			for i := range hosts {
				pool = append(pool, i)
			}
		}
		slot := 0
		if m := clientName.FindStringSubmatch(node); m != nil {
			slot, _ = strconv.Atoi(m[1])
		}
		return pool[slot%len(pool)], nil
	}
	busy := map[int]bool{}
	for n, i := range placed {
		if lockNodeName.MatchString(n) {
			busy[i] = true
		}
	}
	for i := range hosts {
		for _, n := range append([]string{hosts[i].Name}, hosts[i].Nodes...) {
			if lockNodeName.MatchString(n) {
				busy[i] = true
			}
		}
	}
	for _, explicit := range []bool{true, false} {
		for i := range hosts {
			rs := hosts[i].roles()
			ok := slices.Contains(rs, RoleNode)
			if !explicit {
				ok = len(rs) == 0
			}
			if ok && !busy[i] {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("no host for node %q: name a host %q in the hosts file (or list it under a host's nodes), or add a host with role %s", node, node, RoleNode)
}
