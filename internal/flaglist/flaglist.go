// Package flaglist parses the comma-separated values of command-line flags
// ("--time-scale 1,10", "--allow a:1,b:2", "--sweep-eff 512,1024"), one way for every binary.
package flaglist

import (
	"fmt"
	"strings"
)

// Items returns the comma-separated items of s, trimmed, empty ones dropped.
func Items(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Parse parses every item of s with parse. Each bad item is one error naming the flag, the
// item and what it must be ("--time-scale: \"x\" is not a number > 0"); all are returned.
func Parse[T any](flag, s, what string, parse func(string) (T, error)) ([]T, []error) {
	var out []T
	var errs []error
	for _, v := range Items(s) {
		x, err := parse(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not %s", flag, v, what))
			continue
		}
		out = append(out, x)
	}
	return out, errs
}
