package main

import "syscall"

// dieWithParent makes a child (redis-server, a worker) get SIGKILL when this
// process dies, so an interrupted run leaves nothing behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
