package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// followGoRun: `go run` neither forwards SIGTERM to the program it runs
// nor outlives it: it dies, and the daemon, re-parented, keeps running and
// holding its ports. Under go run, the kernel is asked to send SIGTERM
// when the parent goes, so the daemon drains as if it had been sent.
// Other parents are left alone: a worker started with nohup must outlive
// its shell.
func followGoRun() {
	ppid := os.Getppid()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
	if err != nil || filepath.Base(exe) != "go" {
		return
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); e != 0 {
		return
	}
	if os.Getppid() != ppid { // go run went before the request took
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
