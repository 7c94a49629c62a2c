package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// followGoRun: `go run` neither forwards SIGTERM to the program it runs
// nor outlives it: it dies, and the daemon, re-parented, keeps running and
// holding its ports. Under go run the kernel is asked to send sig when the
// parent goes; the caller has sig caught and drains. Other parents are left
// alone (a worker started with nohup must outlive its shell): false.
func followGoRun(sig syscall.Signal) bool {
	ppid := os.Getppid()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
	if err != nil || filepath.Base(exe) != "go" {
		return false
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(sig), 0); e != 0 {
		return false
	}
	if os.Getppid() != ppid { // go run went before the request took
		_ = syscall.Kill(os.Getpid(), sig)
	}
	return true
}
