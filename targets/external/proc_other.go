//go:build !linux

package external

import "syscall"

// sysProcAttr starts the adapter as the leader of its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
