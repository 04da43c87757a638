package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// AccessEntry is one line of an Envoy access log written with Config.AccessLog: where Envoy
// sent one request, and when it received it.
type AccessEntry struct {
	Start    time.Time // when Envoy received the request's first byte (ms precision)
	Method   string
	Path     string
	Status   int    // 0 when no response was sent (the client went away first)
	Details  string // %RESPONSE_CODE_DETAILS%
	Route    string // prefill, decode, fallback, no_decision; "" when none matched
	Upstream string // the host Envoy connected to; "" when none
	Dest     string // x-gateway-destination-endpoint as condisagg set it
	Decode   string // x-condisagg-decode-host: the decode worker of a remote-prefill request
}

// accessTimeLayout is Envoy's default %START_TIME% format.
const accessTimeLayout = "2006-01-02T15:04:05.000Z"

// AccessLog reads env's access log (Config.AccessLog). Envoy flushes it about once a second,
// so the newest requests may be missing: callers poll until the lines they expect are there.
func (s *Stack) AccessLog(env *envoy.Process) ([]AccessEntry, error) {
	path, ok := s.accessLogs[env]
	if !ok {
		return nil, fmt.Errorf("e2e: access log: the stack was started without Config.AccessLog")
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil // nothing logged yet
	}
	if err != nil {
		return nil, fmt.Errorf("e2e: access log: %w", err)
	}
	defer f.Close()
	var out []AccessEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		e, err := parseAccessLine(line)
		if err != nil {
			return nil, fmt.Errorf("e2e: access log %s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// parseAccessLine reads the format of envoy/bootstrap.yaml.tmpl:
// [START] "METHOD PATH" CODE DETAILS route=… upstream=… cluster=… dest=… decode=… rx=… tx=… dur=…ms
// Envoy writes "-" for an empty value.
func parseAccessLine(line string) (AccessEntry, error) {
	var e AccessEntry
	rest, ok := strings.CutPrefix(line, "[")
	ts, rest, ok2 := strings.Cut(rest, "] \"")
	if !ok || !ok2 {
		return e, fmt.Errorf("line %q: no [start] \"request\"", line)
	}
	var err error
	if e.Start, err = time.Parse(accessTimeLayout, ts); err != nil {
		return e, fmt.Errorf("line %q: %w", line, err)
	}
	req, rest, ok := strings.Cut(rest, "\" ")
	if !ok {
		return e, fmt.Errorf("line %q: unterminated request", line)
	}
	e.Method, e.Path, _ = strings.Cut(req, " ")
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return e, fmt.Errorf("line %q: no status and details", line)
	}
	e.Status, _ = strconv.Atoi(fields[0]) // "0" or "-" without a response
	e.Details = dash(fields[1])
	for _, f := range fields[2:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "route":
			e.Route = dash(v)
		case "upstream":
			e.Upstream = dash(v)
		case "dest":
			e.Dest = dash(v)
		case "decode":
			e.Decode = dash(v)
		}
	}
	return e, nil
}

func dash(v string) string {
	if v == "-" {
		return ""
	}
	return v
}
