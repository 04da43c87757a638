package proc

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseLogLine(t *testing.T) {
	for _, c := range []struct {
		name string
		line string
		want logLine
	}{
		{"slog_text", `time=2025-01-02T03:04:05Z level=INFO msg="vllm-sim listening" endpoint=127.0.0.1:8000 kv_events=tcp://127.0.0.1:5557`,
			logLine{"vllm-sim listening", map[string]string{"time": "2025-01-02T03:04:05Z", "level": "INFO",
				"msg": "vllm-sim listening", "endpoint": "127.0.0.1:8000", "kv_events": "tcp://127.0.0.1:5557"}}},
		{"quoted_value_with_escapes_and_equals", `msg=x err="open \"a=b\": no\tsuch"`,
			logLine{"x", map[string]string{"msg": "x", "err": "open \"a=b\": no\tsuch"}}},
		{"slog_json_keeps_number_text", `{"level":"INFO","msg":"serving","port":8000,"ok":true,"g":{"a":1}}`,
			logLine{"serving", map[string]string{"level": "INFO", "msg": "serving", "port": "8000", "ok": "true", "g": `{"a":1}`}}},
		{"words_without_equals_are_skipped", `[info] starting server at=:80 now`,
			logLine{"", map[string]string{"at": ":80"}}},
		{"unterminated_quote_is_taken_as_is", `msg="half open`,
			logLine{`"half`, map[string]string{"msg": `"half`}}},
		{"brace_but_not_json_is_text", `{not json} msg=ok`,
			logLine{"ok", map[string]string{"msg": "ok"}}},
		{"empty", ``, logLine{"", map[string]string{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := parseLogLine(c.line)
			if got.msg != c.want.msg || !maps.Equal(got.attrs, c.want.attrs) {
				t.Errorf("parseLogLine(%q)\n got %q %v\nwant %q %v", c.line, got.msg, got.attrs, c.want.msg, c.want.attrs)
			}
		})
	}
}

// FuzzParseLogLine: no input panics, and a value written by slog's own text and JSON handlers
// reads back unchanged (the round trip through the encoder the processes use).
func FuzzParseLogLine(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8000", `a "quoted" = value`, "tab\there", "", "{", "\x00\xff", "ünï"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		parseLogLine(v)
		for _, h := range []func(*bytes.Buffer) slog.Handler{
			func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		} {
			var b bytes.Buffer
			slog.New(h(&b)).Info("fuzz line", "v", v)
			line := strings.TrimSuffix(b.String(), "\n")
			if strings.Contains(line, "\n") {
				continue // not one line: nothing to read back
			}
			got := parseLogLine(line)
			want := v
			if strings.HasPrefix(line, "{") {
				want = jsonText(v)
			}
			if got.msg != "fuzz line" || got.attrs["v"] != want {
				t.Errorf("line %q read back msg=%q v=%q; want %q", line, got.msg, got.attrs["v"], want)
			}
		}
	})
}

// jsonText is v as slog's JSON handler writes it: each byte of invalid UTF-8 becomes U+FFFD.
func jsonText(v string) string {
	var b strings.Builder
	for len(v) > 0 {
		r, n := utf8.DecodeRuneInString(v)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(v[:n])
		}
		v = v[n:]
	}
	return b.String()
}
