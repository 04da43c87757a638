package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestRequested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"version"}, true},
		{nil, false},
		{[]string{"--version", "x"}, false},
		{[]string{"serve"}, false},
	} {
		if got := Requested(c.args); got != c.want {
			t.Errorf("Requested(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestStringDefaults(t *testing.T) {
	got := String("x")
	if !strings.HasPrefix(got, "x dev (revision ") || !strings.HasSuffix(got, ", "+runtime.Version()+")") {
		t.Errorf("String = %q", got)
	}
}
