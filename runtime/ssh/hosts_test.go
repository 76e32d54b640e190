package ssh

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseNodeList(t *testing.T) {
	tests := []struct {
		in      string
		want    []Host
		wantErr string
	}{
		{in: "10.0.0.1", want: []Host{{Name: "n1", Address: "10.0.0.1", Port: 22, User: "root"}}},
		{in: "admin@db1:2222, db2", want: []Host{
			{Name: "n1", Address: "db1", Port: 2222, User: "admin"},
			{Name: "n2", Address: "db2", Port: 22, User: "root"},
		}},
		{in: "root@[fd00::1]:2200,fd00::2,[fd00::3]", want: []Host{
			{Name: "n1", Address: "fd00::1", Port: 2200, User: "root"},
			{Name: "n2", Address: "fd00::2", Port: 22, User: "root"},
			{Name: "n3", Address: "fd00::3", Port: 22, User: "root"},
		}},
		{in: "a,,b", wantErr: "empty entry 2"},
		{in: "@host", wantErr: "empty user"},
		{in: "host:99999", wantErr: "bad port"},
		{in: "host:ssh", wantErr: "bad port"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseNodeList(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseHosts(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, hs []Host)
		wantErr string
	}{
		{name: "defaults apply", yaml: `
defaults:
  user: admin
  port: 2222
  auth: {key: ~/.ssh/lab}
hosts:
  - name: n1
    address: 192.0.2.1
  - name: n2
    address: 192.0.2.2
    user: root
    port: 22
    auth: {agent: true}
  - name: load
    address: load.example
    role: client
    nodes: [store]
`, check: func(t *testing.T, hs []Host) {
			if hs[0].User != "admin" || hs[0].Port != 2222 || hs[0].Auth.Key != "~/.ssh/lab" {
				t.Fatalf("defaults not applied: %+v", hs[0])
			}
			if hs[1].User != "root" || hs[1].Port != 22 || !hs[1].Auth.Agent || hs[1].Auth.Key != "" {
				t.Fatalf("host settings overridden: %+v", hs[1])
			}
			if !hs[2].HasRole(RoleClient) || hs[2].HasRole(RoleNode) || !hs[0].HasRole(RoleNode) {
				t.Fatalf("roles: %+v", hs)
			}
		}},
		{name: "unknown field", yaml: "hosts:\n  - name: n1\n    adress: x\n", wantErr: "field adress not found"},
		{name: "no address", yaml: "hosts:\n  - name: n1\n", wantErr: `host "n1" has no address`},
		{name: "no name", yaml: "hosts:\n  - address: x\n", wantErr: "has no name"},
		{name: "duplicate", yaml: "hosts:\n  - {name: n1, address: a}\n  - {name: b, address: b, nodes: [n1]}\n", wantErr: `node "n1" is placed on both`},
		{name: "bad role", yaml: "hosts:\n  - {name: n1, address: a, roles: [db]}\n", wantErr: `unknown role "db"`},
		{name: "empty", yaml: "hosts: []\n", wantErr: "no hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := ParseHosts([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, hs)
		})
	}
}

func TestPlace(t *testing.T) {
	three := []Host{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}}
	withClients := []Host{{Name: "db1"}, {Name: "db2"}, {Name: "db3"}, {Name: "load1", Roles: []string{RoleClient}}, {Name: "load2", Role: RoleClient}}
	named := []Host{{Name: "n1"}, {Name: "x", Nodes: []string{"store", "c2"}}, {Name: "spare", Roles: []string{RoleNode}}}
	tests := []struct {
		name  string
		hosts []Host
		order []string
		want  []string // host of each node in order
		err   string
	}{
		{name: "nodes by name, clients round-robin over all", hosts: three,
			order: []string{"n1", "n2", "n3", "store", "c1", "c2", "c3", "c4"},
			want:  []string{"n1", "n2", "n3", "n1", "n2", "n3", "n1", "n2"}},
		{name: "clients on client hosts, lock nodes on the others", hosts: withClients,
			order: []string{"n1", "n2", "n3", "store", "c1", "c2", "c3"},
			want:  []string{"db1", "db2", "db3", "load1", "load2", "load1", "load2"}},
		{name: "nodes lists and role node", hosts: named,
			order: []string{"n1", "n2", "store", "c2", "c1"},
			want:  []string{"n1", "spare", "x", "x", "x"}},
		{name: "no host left for a lock node", hosts: three, order: []string{"n1", "n2", "n3", "n4"}, err: `no host for node "n4"`},
		{name: "client hosts take no lock node", hosts: []Host{{Name: "load", Role: RoleClient}}, order: []string{"n1"}, err: `no host for node "n1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			placed := map[string]int{}
			var got []string
			for _, n := range tt.order {
				i, err := Place(tt.hosts, n, placed)
				if err != nil {
					if tt.err == "" || !strings.Contains(err.Error(), tt.err) {
						t.Fatalf("place %s: %v", n, err)
					}
					return
				}
				placed[n] = i
				got = append(got, tt.hosts[i].Name)
			}
			if tt.err != "" {
				t.Fatalf("placed %v, want error %q", got, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
