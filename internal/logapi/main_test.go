package logapi

import (
	"os"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
