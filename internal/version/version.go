// Package version says which build of onceq is running, for --version, the
// start-up line and onceq_build_info. A build without the repository (the
// image: .dockerignore drops .git) stamps it at link time:
//
//	go build -ldflags "-X github.com/onceq/onceq/internal/version.version=v0.2.0 -X github.com/onceq/onceq/internal/version.commit=$(git rev-parse HEAD)"
//
// otherwise it is the Go toolchain's stamp of the checkout (go build in a
// git clone records the module version and the VCS revision).
package version

import (
	"runtime/debug"
	"strings"
)

// Set with -ldflags -X; empty in a plain build.
var version, commit string

// Get is the version (a tag, or Go's pseudo-version; "(devel)" when
// nothing stamped it) and the commit ("" when unknown, "+dirty" appended
// for a modified checkout).
func Get() (v, c string) {
	v, c = version, commit
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDevel(v), c
	}
	if v == "" {
		v = bi.Main.Version
	}
	if c == "" {
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && c != "" {
			c += "+dirty"
		}
	}
	return orDevel(v), c
}

func orDevel(v string) string {
	if v == "" {
		return "(devel)"
	}
	return v
}

// String is "<version> (<commit, short>) <go version>", for --version.
func String() string {
	v, c := Get()
	if c != "" {
		short, dirty, _ := strings.Cut(c, "+")
		if len(short) > 12 {
			short = short[:12]
		}
		if dirty != "" {
			short += "+" + dirty
		}
		v += " (" + short + ")"
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v += " " + bi.GoVersion
	}
	return v
}
