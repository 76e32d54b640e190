package store

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Role is the store's image role and node name.
const Role = runtime.RoleStore

// Deploy starts the counter store as node "store" from image and waits
// until it listens. It returns the node and the store's address.
func Deploy(ctx context.Context, rt runtime.Runtime, image string) (runtime.Node, string, error) {
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: Role, Role: Role, Image: image,
		Cmd:  []string{"/usr/local/bin/splitbrain", "store", "--listen", ":" + strconv.Itoa(Port)},
		Caps: []string{runtime.CapNetAdmin},
	})
	if err != nil {
		return nil, "", fmt.Errorf("start store: %w", err)
	}
	if err := runtime.WaitPort(ctx, n, Port, 20*time.Second); err != nil {
		return nil, "", err
	}
	return n, net.JoinHostPort(n.Addr().String(), strconv.Itoa(Port)), nil
}
