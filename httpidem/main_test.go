package httpidem_test

import (
	"os"
	"testing"

	"github.com/onceq/onceq/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
