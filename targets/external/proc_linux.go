package external

import "syscall"

// sysProcAttr starts the adapter as the leader of its own process group
// (so that it and its children can be killed together) and kills it when
// the agent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
