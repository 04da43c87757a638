package main

import "strings"

// headerDecision is the router's debug header (ARCHITECTURE.md §2), present with
// --debug-headers: route=…;reason=…;isl=…;eff_isl=…;overlap_blocks=….
const headerDecision = "X-Condisagg-Decision"

// parseDecision returns the route and reason of a decision header value ("" when absent).
func parseDecision(v string) (route, reason string) {
	for field := range strings.SplitSeq(v, ";") {
		k, val, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch k {
		case "route":
			route = val
		case "reason":
			reason = val
		}
	}
	return route, reason
}
