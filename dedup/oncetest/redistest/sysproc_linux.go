package redistest

import "syscall"

// dieWithParent has the kernel kill redis-server when the process that
// started it dies, so an interrupted test or benchmark leaves nothing behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
