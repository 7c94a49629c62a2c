package peertest

import "syscall"

// dieWithParent has the kernel kill the peer when the test binary dies, so
// an interrupted run leaves nothing behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
