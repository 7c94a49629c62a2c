package mark

import (
	"os"
	"testing"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
