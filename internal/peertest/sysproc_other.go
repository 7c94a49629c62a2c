//go:build !linux

package peertest

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
