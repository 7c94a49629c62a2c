//go:build !linux

package main

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
