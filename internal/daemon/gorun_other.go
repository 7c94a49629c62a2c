//go:build !linux

package daemon

func followGoRun() {}
