package faulttest

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/peertest"
)

// gateEnv turns the slow scenarios on.
const gateEnv = "ONCEQ_FAULT_TESTS"

func TestMain(m *testing.M) {
	flag.Parse()
	on := os.Getenv(gateEnv) == "1"
	if on && !flagSet("test.parallel") {
		// The scenarios spend their minutes waiting on asynq's timers (the
		// recoverer ticks once a minute), not on the CPU: run them all at once
		// rather than GOMAXPROCS at a time.
		flag.Set("test.parallel", "8")
	}
	code := m.Run()
	removeBinaries()
	peertest.StopShared()
	httpc.CloseIdleConnections()
	if code == 0 && on {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "faulttest: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// requireFaultTests skips unless ONCEQ_FAULT_TESTS=1: each scenario takes
// minutes, and the default go test ./... stays quick.
func requireFaultTests(t *testing.T) {
	t.Helper()
	if os.Getenv(gateEnv) != "1" {
		t.Skipf("faulttest: real-process fault scenarios take minutes; set %s=1 to run them", gateEnv)
	}
}
