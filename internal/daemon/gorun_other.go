//go:build !linux

package daemon

import "syscall"

func followGoRun(syscall.Signal) bool { return false }
