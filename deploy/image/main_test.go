package image

import (
	"fmt"
	"os"
	"testing"
)

// sharedDir holds the builds the tests of this package share (buildOnce).
var sharedDir string

func TestMain(m *testing.M) {
	var err error
	if sharedDir, err = os.MkdirTemp("", "condisagg-image-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(sharedDir)
	os.Exit(code)
}
