package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// envoyStack is the real Envoy in front of condisagg (BUFFERED, fail-closed), as a client of
// the router sends its requests.
type envoyStack struct {
	p   *envoy.Process
	out *os.File
}

func startEnvoy(ctx context.Context, c *config) (*envoyStack, error) {
	bin, err := envoy.FindBinary()
	if err != nil {
		return nil, err
	}
	p := envoy.Params{Mode: envoy.Buffered, FailOpen: envoy.FailClosed,
		ExtProc: envoy.Endpoint{Host: "127.0.0.1", Port: c.listen},
		Proxy:   envoy.Proxy{HealthCheckInterval: time.Second, AccessLogPath: filepath.Join(c.workdir, "envoy-access.log")}}
	path, err := envoy.WriteBootstrap(c.workdir, p)
	if err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(c.workdir, "envoy.log"))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := envoy.Start(sctx, bin, path, envoy.StartOptions{Output: out, FileFlushInterval: time.Second})
	if err != nil {
		out.Close()
		return nil, err
	}
	s := &envoyStack{p: e, out: out}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n, err := e.Counter(ctx, "cluster.condisagg.membership_healthy"); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("envoy does not see condisagg healthy after 30s")
		}
	}
	v, _ := envoy.BinaryVersion(ctx, bin)
	fmt.Printf("envoy %s listening on %s\n", v, e.ListenerAddr("llm"))
	return s, nil
}

func (s *envoyStack) stop() {
	_ = s.p.Stop()
	s.out.Close()
}

// extProcFailures are the Envoy counters that say a request was not decided by condisagg.
var extProcFailures = []string{"http.llm.ext_proc.streams_failed", "http.llm.ext_proc.failure_mode_allowed",
	"http.llm.ext_proc.message_timeouts"}

// failures returns every nonzero ext_proc failure counter, and an error if Envoy names none of
// them (the counters would not prove anything).
func (s *envoyStack) failures(ctx context.Context) (map[string]uint64, error) {
	out := map[string]uint64{}
	if _, err := s.p.Counter(ctx, "http.llm.ext_proc.streams_started"); err != nil {
		return nil, fmt.Errorf("envoy has no ext_proc stream counter: %w", err)
	}
	for _, name := range extProcFailures {
		if n, err := s.p.Counter(ctx, name); err == nil && n > 0 {
			out[name] = n
		}
	}
	return out, nil
}

// answer is what the client saw of one request.
type answer struct {
	status     int
	route      string // x-condisagg-decision route
	isl, eff   int64  // x-condisagg-decision isl and eff_isl
	kvTransfer string // pd-sidecar's X-Condisagg-KV-Transfer
	pCached    int64  // pd-sidecar's X-Condisagg-Prefill-Cached-Tokens; -1: absent
	hasUsage   bool
	prompt     int64  // usage.prompt_tokens
	cached     int64  // usage.prompt_tokens_details.cached_tokens; -1: absent
	text       string // the generated text (choices' text, message content or deltas)
	finish     string // the last finish_reason
	tokenDelta int    // stream events with a choice other than the role-only opening one
	completion int64  // usage.completion_tokens
	errEvent   bool   // an error event in the stream
	truncated  bool   // the stream or body ended before its end (a read error)
	body       string
}

type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// post sends one request through Envoy. firstByte, when not nil, is closed once the first body
// bytes arrive (the kill rows time their kill by it).
func (d *driver) post(ctx context.Context, path string, body []byte, hdr map[string]string, firstByte chan<- struct{}) (answer, error) {
	return d.postTo(ctx, d.envoy.p.ListenerAddr("llm"), path, body, hdr, firstByte)
}

// postTo is post to addr (host:port) instead of Envoy.
func (d *driver) postTo(ctx context.Context, addr, path string, body []byte, hdr map[string]string, firstByte chan<- struct{}) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, kvTransfer: resp.Header.Get("X-Condisagg-KV-Transfer"), pCached: -1, cached: -1}
	if v := resp.Header.Get("X-Condisagg-Prefill-Cached-Tokens"); v != "" {
		a.pCached, _ = strconv.ParseInt(v, 10, 64)
	}
	for _, kv := range strings.Split(resp.Header.Get("X-Condisagg-Decision"), ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "route":
			a.route = v
		case "isl":
			a.isl, _ = strconv.ParseInt(v, 10, 64)
		case "eff_isl":
			a.eff, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	var buf bytes.Buffer
	r := io.TeeReader(resp.Body, &buf)
	if firstByte != nil {
		one := make([]byte, 1)
		if n, _ := r.Read(one); n == 0 {
			close(firstByte)
			a.truncated = true
			return a, nil
		}
		close(firstByte)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		a.truncated = true
	}
	a.body = buf.String()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(strings.NewReader(a.body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ev struct {
				Error   json.RawMessage `json:"error"`
				Usage   *usage          `json:"usage"`
				Choices []choice        `json:"choices"`
			}
			if json.Unmarshal([]byte(data), &ev) != nil {
				continue
			}
			for _, c := range ev.Choices {
				a.see(c)
				if c.Delta == nil || c.Delta.Role == "" {
					a.tokenDelta++
				}
			}
			a.errEvent = a.errEvent || len(ev.Error) > 0
			if ev.Usage != nil {
				a.setUsage(ev.Usage)
			}
		}
		return a, nil
	}
	var full struct {
		Usage   *usage   `json:"usage"`
		Choices []choice `json:"choices"`
	}
	if json.Unmarshal(buf.Bytes(), &full) == nil && full.Usage != nil {
		a.setUsage(full.Usage)
	}
	for _, c := range full.Choices {
		a.see(c)
	}
	return a, nil
}

// choice is one choice of a completion or chat answer, whole or a stream's delta.
type choice struct {
	Text    string `json:"text"`
	Message *struct {
		Content string `json:"content"`
	} `json:"message"`
	Delta *struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"delta"`
	FinishReason string `json:"finish_reason"`
}

func (a *answer) see(c choice) {
	a.text += c.text()
	if c.FinishReason != "" {
		a.finish = c.FinishReason
	}
}

// generated reports whether the answer is a finished completion of at least one token (the
// tiny model's tokens may decode to no text, so the text alone does not say).
func (a *answer) generated() bool {
	return a.finish != "" && (strings.TrimSpace(a.text) != "" || a.completion > 0 || a.tokenDelta > 0)
}

func (c choice) text() string {
	switch {
	case c.Message != nil:
		return c.Message.Content
	case c.Delta != nil:
		return c.Delta.Content
	}
	return c.Text
}

func (a *answer) setUsage(u *usage) {
	a.hasUsage, a.prompt, a.cached, a.completion = true, u.PromptTokens, -1, u.CompletionTokens
	if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
		a.cached = *u.PromptTokensDetails.CachedTokens
	}
}
