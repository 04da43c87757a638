package proc

import (
	"encoding/json"
	"strconv"
	"strings"
)

// logLine is one parsed output line: its message and attributes.
type logLine struct {
	msg   string
	attrs map[string]string
}

// parseLogLine reads a log/slog line in JSON or text form into its attributes, each value as
// text; msg is the "msg" attribute. A line of neither form yields whatever key=value pairs it
// holds, usually none.
func parseLogLine(line string) logLine {
	attrs := map[string]string{}
	if !parseJSONLine(line, attrs) {
		parseTextLine(line, attrs)
	}
	return logLine{msg: attrs["msg"], attrs: attrs}
}

// parseJSONLine reads a JSON object's members: strings unquoted, anything else as its JSON
// text (so a port stays "8000", not a float).
func parseJSONLine(line string, attrs map[string]string) bool {
	if !strings.HasPrefix(line, "{") {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &m) != nil {
		return false
	}
	for k, raw := range m {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			attrs[k] = s
		} else {
			attrs[k] = string(raw)
		}
	}
	return true
}

// parseTextLine reads slog's text form: key=value pairs separated by spaces, a value quoted
// (Go syntax) when it holds spaces, quotes or '='. Words without '=' are skipped.
func parseTextLine(line string, attrs map[string]string) {
	rest := line
	for {
		rest = strings.TrimLeft(rest, " ")
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			return
		}
		if sp := strings.IndexByte(rest, ' '); sp >= 0 && sp < eq {
			rest = rest[sp:]
			continue
		}
		key, val := rest[:eq], rest[eq+1:]
		if strings.HasPrefix(val, `"`) {
			if q, err := strconv.QuotedPrefix(val); err == nil {
				attrs[key], _ = strconv.Unquote(q)
				rest = val[len(q):]
				continue
			}
		}
		attrs[key], rest, _ = strings.Cut(val, " ")
	}
}
