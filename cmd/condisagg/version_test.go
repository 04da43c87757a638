package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersion: --version and the version command print one line naming the binary and exit 0
// (the image test checks the stamped values).
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), []string{arg}, &out, &errb); code != 0 || errb.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errb.String())
		}
		if s := out.String(); !strings.HasPrefix(s, "condisagg ") || strings.Count(s, "\n") != 1 {
			t.Errorf("%s: %q", arg, s)
		}
	}
}
