package kvevents

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

var update = flag.Bool("update", false, "rewrite golden test files with the actual output")

// TestStreamScripts runs the stream machine scripts in testdata/stream/*.txt.
//
// Script format: one input per unindented line; the actions it produced follow on lines indented
// by two spaces. Lines starting with '#' and blank lines are kept as they are. Inputs:
//
//	options replay=on|off msgs=N bytes=N   new machine (default: replay on, default bounds)
//	live SEQ[:PAYLOAD] ...                 live messages; A..B is a range; payload defaults to pSEQ
//	replay SEQ[:PAYLOAD] ... [END]         replayed batches, then optionally how the replay ended:
//	                                       end | timeout | malformed | failed
//	reconnect                              transport reconnect
//	resume SEQ[:PAYLOAD]                   Resume from a snapshot ending at SEQ (digest of PAYLOAD)
//	state                                  print the machine state
//
// Run with -update to rewrite the expected actions.
func TestStreamScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/stream/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata/stream: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScript(t, f)
		})
	}
}

type scriptCmd struct {
	line     int
	input    string
	expected []string
	comments []string // lines before the input (comments, blanks)
}

func parseScript(t *testing.T, path string) ([]scriptCmd, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []scriptCmd
	var pre []string
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  ") && len(cmds) > 0 && len(pre) == 0:
			c := &cmds[len(cmds)-1]
			c.expected = append(c.expected, strings.TrimSpace(line))
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			pre = append(pre, line)
		default:
			cmds = append(cmds, scriptCmd{line: n, input: strings.TrimSpace(line), comments: pre})
			pre = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds, pre
}

func runScript(t *testing.T, path string) {
	cmds, trailer := parseScript(t, path)
	st := NewStream(StreamOptions{HasReplay: true})
	var out strings.Builder
	for _, c := range cmds {
		got, err := execScript(&st, c.input)
		if err != nil {
			t.Fatalf("%s:%d: %v", path, c.line, err)
		}
		for _, l := range c.comments {
			out.WriteString(l + "\n")
		}
		out.WriteString(c.input + "\n")
		for _, g := range got {
			out.WriteString("  " + g + "\n")
		}
		if !*update && strings.Join(got, "\n") != strings.Join(c.expected, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n  %s\nwant:\n  %s", path, c.line, c.input,
				strings.Join(got, "\n  "), strings.Join(c.expected, "\n  "))
		}
	}
	for _, l := range trailer {
		out.WriteString(l + "\n")
	}
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func execScript(stp **Stream, input string) ([]string, error) {
	fields := strings.Fields(input)
	st := *stp
	var out []string
	record := func(acts []Action) {
		for _, a := range acts {
			out = append(out, a.String())
		}
	}
	switch fields[0] {
	case "options":
		opts, err := parseOptions(fields[1:])
		if err != nil {
			return nil, err
		}
		*stp = NewStream(opts)
	case "live":
		msgs, err := parseMsgs(fields[1:])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			record(st.Live(m.seq, m.payload))
		}
	case "replay":
		items := fields[1:]
		end := ReplayEnd(0)
		if n := len(items); n > 0 {
			if e, ok := scriptEnds[items[n-1]]; ok {
				end, items = e, items[:n-1]
			}
		}
		msgs, err := parseMsgs(items)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			record(st.ReplayBatch(m.seq, m.payload))
		}
		if end != 0 {
			record(st.EndReplay(end))
		}
	case "reconnect":
		record(st.Reconnect())
	case "resume":
		msgs, err := parseMsgs(fields[1:])
		if err != nil || len(msgs) != 1 {
			return nil, fmt.Errorf("resume wants one SEQ[:PAYLOAD]: %v", err)
		}
		record(st.Resume(msgs[0].seq, xxh3.Hash(msgs[0].payload)))
	case "state":
		out = append(out, formatState(st.State()))
	default:
		return nil, fmt.Errorf("unknown input %q", fields[0])
	}
	return out, nil
}

var scriptEnds = map[string]ReplayEnd{"end": EndMarker, "timeout": EndTimeout, "malformed": EndMalformed, "failed": EndFailed}

func parseOptions(args []string) (StreamOptions, error) {
	opts := StreamOptions{HasReplay: true}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "replay":
			opts.HasReplay = v == "on"
		case "msgs", "bytes":
			n, err := strconv.Atoi(v)
			if err != nil {
				return opts, fmt.Errorf("options %s: %w", a, err)
			}
			if k == "msgs" {
				opts.PendingMessages = n
			} else {
				opts.PendingBytes = n
			}
		default:
			return opts, fmt.Errorf("unknown option %q", a)
		}
	}
	return opts, nil
}

func parseMsgs(items []string) ([]heldMsg, error) {
	var msgs []heldMsg
	for _, it := range items {
		s, payload, hasPayload := strings.Cut(it, ":")
		lo, hi, isRange := strings.Cut(s, "..")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad seq %q: %w", it, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil {
				return nil, fmt.Errorf("bad range %q: %w", it, err)
			}
		}
		if b < a {
			return nil, fmt.Errorf("bad range %q: the end is before the start", it)
		}
		for q := a; ; q++ { // q <= b would never end at the largest seq
			p := "p" + strconv.FormatUint(q, 10)
			if hasPayload {
				p = payload
			}
			msgs = append(msgs, heldMsg{seq: q, payload: []byte(p)})
			if q == b {
				break
			}
		}
	}
	return msgs, nil
}

func formatState(s StreamState) string {
	expect, last := "unset", "none"
	if s.ExpectSet {
		expect = strconv.FormatUint(s.Expect, 10)
	}
	if s.HasLast {
		last = strconv.FormatUint(s.LastSeq, 10)
	}
	return fmt.Sprintf("expect=%s last=%s replaying=%t pending=%d gaps=%d restarts=%d reconnects=%d replays=%d lost=%d history_lost=%d clears=%d",
		expect, last, s.Replaying, s.Pending, s.Gaps, s.Restarts, s.Reconnects, s.Replays, s.ReplaysLost, s.HistoryLost, s.Clears)
}

// TestStreamWarm: a new stream with a replay endpoint asks for everything retained; a reply
// that starts late (vLLM keeps only its last buffer_steps batches) is applied without counting
// lost history, and live processing continues after it. Warm does nothing once the stream has
// applied a batch, or without a replay endpoint.
func TestStreamWarm(t *testing.T) {
	st := NewStream(StreamOptions{HasReplay: true})
	acts := st.Warm()
	if len(acts) != 1 || acts[0].Kind != ActReplay || acts[0].Seq != 0 {
		t.Fatalf("Warm = %+v, want one replay from 0", acts)
	}
	var applied []uint64
	collect := func(acts []Action) {
		for _, a := range acts {
			if a.Kind == ActApply {
				applied = append(applied, a.Seq)
			}
		}
	}
	for seq := uint64(3); seq <= 5; seq++ {
		collect(st.ReplayBatch(seq, []byte{byte(seq)}))
	}
	collect(st.Live(6, []byte{6})) // arrives during the replay: held, applied after it
	collect(st.EndReplay(EndMarker))
	if s := st.State(); s.HistoryLost != 0 || s.ReplaysLost != 0 {
		t.Fatalf("warm-up counted loss: %+v", s)
	}
	if len(applied) != 4 || applied[0] != 3 || applied[3] != 6 {
		t.Fatalf("applied %v, want 3 4 5 6", applied)
	}
	if acts := st.Warm(); len(acts) != 0 {
		t.Fatalf("Warm after applying: %+v", acts)
	}
	if acts := NewStream(StreamOptions{}).Warm(); len(acts) != 0 {
		t.Fatalf("Warm without a replay endpoint: %+v", acts)
	}
}
