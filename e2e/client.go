package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/condisagg/condisagg/envoy"
	condisaggv1 "github.com/condisagg/condisagg/proto/condisagg/v1"
)

// maxResponseBytes bounds what the client reads of one answer.
const maxResponseBytes = 8 << 20

// Decision is the parsed x-condisagg-decision header
// (route=…;reason=…;isl=…;eff_isl=…;overlap_blocks=…).
type Decision struct {
	Route, Reason string
	ISL, EffISL   int
	OverlapBlocks int
	Raw           string
}

// ParseDecision parses an x-condisagg-decision value; unknown fields are ignored.
func ParseDecision(v string) (Decision, error) {
	d := Decision{Raw: v}
	if v == "" {
		return d, fmt.Errorf("e2e: decision header: empty")
	}
	for part := range strings.SplitSeq(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return d, fmt.Errorf("e2e: decision header %q: field %q has no '='", v, part)
		}
		var err error
		switch k {
		case "route":
			d.Route = val
		case "reason":
			d.Reason = val
		case "isl":
			d.ISL, err = strconv.Atoi(val)
		case "eff_isl":
			d.EffISL, err = strconv.Atoi(val)
		case "overlap_blocks":
			d.OverlapBlocks, err = strconv.Atoi(val)
		}
		if err != nil {
			return d, fmt.Errorf("e2e: decision header %q: %s: %w", v, k, err)
		}
	}
	return d, nil
}

// Response is one answer received through Envoy.
type Response struct {
	Status       int
	Header       http.Header
	Body         []byte // the raw body (SSE text for streams)
	Text         string // the assistant's content (streamed deltas joined, or the message)
	Decision     Decision
	TTFT         time.Duration // first content event (streams) or the whole answer
	PromptTokens int
	CachedTokens int
	Events       int // SSE data events
	Done         bool
}

// Post sends body to url with the extra headers and reads the whole answer; streams are
// parsed as SSE.
func (s *Stack) Post(ctx context.Context, url string, body []byte, hdr http.Header) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("e2e: post %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	start := time.Now()
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2e: post %s: %w", url, err)
	}
	defer resp.Body.Close()
	r := &Response{Status: resp.StatusCode, Header: resp.Header}
	if v := resp.Header.Get("x-condisagg-decision"); v != "" {
		if r.Decision, err = ParseDecision(v); err != nil {
			return nil, err
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		err = r.readSSE(resp.Body, start)
	} else {
		r.Body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		r.TTFT = time.Since(start)
		r.parseJSON()
	}
	if err != nil {
		return nil, fmt.Errorf("e2e: post %s: read answer: %w", url, err)
	}
	return r, nil
}

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (r *Response) takeUsage(u *usageJSON) {
	if u == nil {
		return
	}
	r.PromptTokens = u.PromptTokens
	if u.PromptTokensDetails != nil {
		r.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
}

func (r *Response) parseJSON() {
	var v struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Text string `json:"text"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(r.Body, &v) != nil {
		return
	}
	for _, c := range v.Choices {
		r.Text += c.Message.Content + c.Text
	}
	r.takeUsage(v.Usage)
}

func (r *Response) readSSE(body io.Reader, start time.Time) error {
	var raw bytes.Buffer
	sc := bufio.NewScanner(io.TeeReader(io.LimitReader(body, maxResponseBytes), &raw))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		r.Events++
		if data == "[DONE]" {
			r.Done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Text string `json:"text"`
			} `json:"choices"`
			Usage *usageJSON `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("SSE event %q: %w", data, err)
		}
		for _, c := range ev.Choices {
			if c.Delta.Content+c.Text != "" && r.TTFT == 0 {
				r.TTFT = time.Since(start)
			}
			text.WriteString(c.Delta.Content + c.Text)
		}
		r.takeUsage(ev.Usage)
	}
	r.Body, r.Text = raw.Bytes(), text.String()
	return sc.Err()
}

// Chat posts a chat completion to the fail-open Envoy's listener.
func (s *Stack) Chat(ctx context.Context, body []byte, hdr http.Header) (*Response, error) {
	return s.Post(ctx, s.URL("/v1/chat/completions"), body, hdr)
}

// ChatVia posts a chat completion to env's listener.
func (s *Stack) ChatVia(ctx context.Context, env *envoy.Process, body []byte, hdr http.Header) (*Response, error) {
	return s.Post(ctx, "http://"+env.ListenerAddr("llm")+"/v1/chat/completions", body, hdr)
}

// URL is path on the fail-open Envoy's listener.
func (s *Stack) URL(path string) string {
	return "http://" + s.Envoy.ListenerAddr("llm") + path
}

// Explain runs `condisagg explain -o json` for a chat body: the decision the router would
// make now, nothing booked.
func (s *Stack) Explain(ctx context.Context, body []byte) (*condisaggv1.ExplainResponse, error) {
	r := &condisaggv1.ExplainResponse{}
	if err := s.client(ctx, body, r, "explain", "--addr", s.AdminGRPC, "-o", "json", "--path", "/v1/chat/completions", "--body", "@-"); err != nil {
		return nil, err
	}
	return r, nil
}

// ListWorkers runs `condisagg workers -o json`.
func (s *Stack) ListWorkers(ctx context.Context) (*condisaggv1.ListWorkersResponse, error) {
	r := &condisaggv1.ListWorkersResponse{}
	if err := s.client(ctx, nil, r, "workers", "--addr", s.AdminGRPC, "-o", "json"); err != nil {
		return nil, err
	}
	return r, nil
}

// client runs the condisagg CLI (args[0] is the subcommand, with -o json) and decodes what it
// prints into out.
func (s *Stack) client(ctx context.Context, stdin []byte, out proto.Message, args ...string) error {
	cmd := exec.CommandContext(ctx, s.cfg.Bin.Condisagg, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("e2e: condisagg %s: %w: %s", args[0], err, stderr.String())
	}
	if err := protojson.Unmarshal(b, out); err != nil {
		return fmt.Errorf("e2e: condisagg %s output: %w\n%s", args[0], err, b)
	}
	return nil
}

// WorkerStatus returns the router's view of the worker named name from `condisagg workers`.
func (s *Stack) WorkerStatus(ctx context.Context, name string) (*condisaggv1.Worker, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range ws.Workers {
		if w.Name == name || w.Id == name {
			return w, nil
		}
	}
	return nil, fmt.Errorf("e2e: condisagg workers: no worker %q", name)
}

// RouterMetric sums the samples of one metric family on condisagg's /metrics whose label
// text contains every one of labels ("pool=\"decode\"").
func (s *Stack) RouterMetric(ctx context.Context, name string, labels ...string) (float64, error) {
	return s.metric(ctx, "http://"+s.AdminAddr+"/metrics", name, labels...)
}

// SimMetric sums a vllm: metric of worker w's simulator.
func (s *Stack) SimMetric(ctx context.Context, w *Worker, name string) (float64, error) {
	return s.metric(ctx, "http://"+w.SimAddr+"/metrics", name)
}

func (s *Stack) metric(ctx context.Context, url, name string, labels ...string) (float64, error) {
	code, body, err := s.Get(ctx, url)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("e2e: GET %s: %d", url, code)
	}
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(lbl, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return 0, fmt.Errorf("e2e: %s: sample %q: %w", url, line, err)
		}
		sum += v
	}
	return sum, nil
}

// Get fetches url and returns the status and body.
func (s *Stack) Get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("e2e: GET %s: %w", url, err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("e2e: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	return resp.StatusCode, body, err
}
