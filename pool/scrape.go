package pool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds of one page.
const (
	maxScrapeBytes = 8 << 20 // a vLLM /metrics page is ~100 KiB
	maxScrapeLine  = 1 << 20
)

// Scrape is what the router reads from a worker's /metrics page: vLLM's (vllm:*) or SGLang's
// (sglang:*, from its scheduler metrics collector). -1 means not exposed.
//
// How it combines with the router's own bookings: capacities (NumGPUBlocks, MaxNumBatchedTokens)
// fill in what the worker config leaves at 0; the request count corrects the selection's
// active-request term as max(booked requests, Running+Waiting) while the scrape is fresher than
// three scrape intervals; KV usage is shown only. The busy thresholds θp and θd and the
// decode-busy guard use router-side bookings alone (conditional-disagg.md §4.2), never scraped
// usage, so two scrapes never change a decision's thresholds between preview and commit.
type Scrape struct {
	At                  time.Time // zero: never scraped successfully
	Running, Waiting    float64   // vllm:num_requests_running / _waiting (sglang:num_running_reqs / num_queue_reqs), summed over engines
	HasRequests         bool
	KVUsage             float64 // vllm:kv_cache_usage_perc (or gpu_cache_usage_perc; sglang:token_usage), max over engines, -1 unknown
	NumGPUBlocks        int64   // vllm:cache_config_info num_gpu_blocks (sglang:num_pages), summed over engines
	BlockSize           int64   // vllm:cache_config_info block_size (sglang:page_size)
	MaxNumBatchedTokens int64   // label max_num_batched_tokens of any *_config_info metric
}

// ErrMetricsFormat reports an unparsable metrics page.
var ErrMetricsFormat = errors.New("malformed metrics text")

// ParseMetrics reads a Prometheus text exposition page (bounded to 8 MiB, lines to 1 MiB) and
// extracts the vLLM values the router uses, summed or maximised over every engine. Unknown
// metrics are ignored.
func ParseMetrics(r io.Reader) (Scrape, error) { return ParseEngineMetrics(r, -1) }

// ParseEngineMetrics is ParseMetrics restricted to the samples of one engine (data-parallel
// rank): those whose `engine` (vLLM) or `dp_rank` (SGLang) label is the rank in decimal, plus
// those without either label (they cannot be attributed). engine < 0 keeps every sample.
//
// SGLang: only the scheduler of attention-TP rank 0 and pipeline rank 0 of each data-parallel
// rank logs its gauges, so no sample is counted twice; with priority scheduling the queue totals
// carry priority="" and the per-priority breakdowns are skipped. Its page is the KV block:
// sglang:num_pages is the capacity in blocks when --page-size equals the router's block size.
func ParseEngineMetrics(r io.Reader, engine int) (Scrape, error) {
	want := ""
	if engine >= 0 {
		want = strconv.Itoa(engine)
	}
	s := Scrape{KVUsage: -1, NumGPUBlocks: -1, BlockSize: -1, MaxNumBatchedTokens: -1}
	lr := &io.LimitedReader{R: r, N: maxScrapeBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 64<<10), maxScrapeLine)
	gpuBlocksUnknown := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return Scrape{}, fmt.Errorf("pool: parse metrics line %d: %w", n, err)
		}
		if want != "" && !engineIs(labels, want) {
			continue
		}
		switch name {
		case "vllm:num_requests_running":
			s.Running += finite(value)
			s.HasRequests = true
		case "vllm:num_requests_waiting":
			s.Waiting += finite(value)
			s.HasRequests = true
		case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
			if !math.IsNaN(value) {
				s.KVUsage = max(s.KVUsage, value)
			}
		case "sglang:num_running_reqs":
			if priorityTotal(labels) {
				s.Running += finite(value)
				s.HasRequests = true
			}
		case "sglang:num_queue_reqs":
			if priorityTotal(labels) {
				s.Waiting += finite(value)
				s.HasRequests = true
			}
		case "sglang:token_usage":
			if !math.IsNaN(value) {
				s.KVUsage = max(s.KVUsage, value)
			}
		case "sglang:num_pages":
			if v := finite(value); v >= 0 && v == math.Trunc(v) && v < math.MaxInt32 {
				s.NumGPUBlocks = max(s.NumGPUBlocks, 0) + int64(v)
			} else {
				gpuBlocksUnknown = true
			}
		case "sglang:page_size":
			if v := finite(value); v > 0 && v == math.Trunc(v) && v < math.MaxInt32 {
				s.BlockSize = int64(v)
			}
		case "vllm:cache_config_info":
			if v, ok := labelInt(labels, "num_gpu_blocks"); ok {
				s.NumGPUBlocks = max(s.NumGPUBlocks, 0) + v
			} else {
				gpuBlocksUnknown = true
			}
			if v, ok := labelInt(labels, "block_size"); ok {
				s.BlockSize = v
			}
		}
		if strings.HasSuffix(name, "_config_info") {
			if v, ok := labelInt(labels, "max_num_batched_tokens"); ok {
				s.MaxNumBatchedTokens = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Scrape{}, fmt.Errorf("pool: parse metrics: %w: %w", ErrMetricsFormat, err)
	}
	if lr.N <= 0 {
		return Scrape{}, fmt.Errorf("pool: parse metrics: body over %d bytes: %w", maxScrapeBytes, ErrMetricsFormat)
	}
	if gpuBlocksUnknown {
		s.NumGPUBlocks = -1 // one engine without a number makes the worker's total unknown
	}
	return s, nil
}

// engineIs reports whether a sample belongs to engine want: its engine (vLLM) or dp_rank
// (SGLang) label equals want, or it has neither.
func engineIs(labels []label, want string) bool {
	for _, l := range labels {
		if l.name == "engine" || l.name == "dp_rank" {
			return l.value == want
		}
	}
	return true
}

// priorityTotal reports whether an SGLang queue sample is the total: without priority
// scheduling it has no priority label, with it the total carries priority="" beside one
// series per priority.
func priorityTotal(labels []label) bool {
	for _, l := range labels {
		if l.name == "priority" {
			return l.value == ""
		}
	}
	return true
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func labelInt(labels []label, key string) (int64, bool) {
	for _, l := range labels {
		if l.name == key {
			v, err := strconv.ParseInt(l.value, 10, 64)
			return v, err == nil && v >= 0
		}
	}
	return 0, false
}

type label struct{ name, value string }

// parseSample splits `name{l="v",...} value [timestamp]`.
func parseSample(line string) (string, []label, float64, error) {
	i := 0
	for i < len(line) && isNameChar(line[i], i == 0) {
		i++
	}
	if i == 0 {
		return "", nil, 0, fmt.Errorf("%w: no metric name in %.40q", ErrMetricsFormat, line)
	}
	name, rest := line[:i], line[i:]
	var labels []label
	if strings.HasPrefix(rest, "{") {
		var err error
		labels, rest, err = parseLabels(rest[1:])
		if err != nil {
			return "", nil, 0, err
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return "", nil, 0, fmt.Errorf("%w: want value [timestamp] after %s", ErrMetricsFormat, name)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("%w: value %.40q of %s", ErrMetricsFormat, fields[0], name)
	}
	return name, labels, v, nil
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

// parseLabels parses `l="v",...}` (the opening brace already consumed) and returns the rest.
func parseLabels(s string) ([]label, string, error) {
	var out []label
	for {
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, "}") {
			return out, s[1:], nil
		}
		i := 0
		for i < len(s) && isNameChar(s[i], i == 0) {
			i++
		}
		if i == 0 || i+1 >= len(s) || s[i] != '=' || s[i+1] != '"' {
			return nil, "", fmt.Errorf("%w: bad label near %.40q", ErrMetricsFormat, s)
		}
		name := s[:i]
		s = s[i+2:]
		var b strings.Builder
		closed := false
		for j := 0; j < len(s); j++ {
			c := s[j]
			if c == '"' {
				s, closed = s[j+1:], true
				break
			}
			if c == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					c = '\n'
				default:
					c = s[j]
				}
			}
			b.WriteByte(c)
		}
		if !closed {
			return nil, "", fmt.Errorf("%w: unterminated value of label %s", ErrMetricsFormat, name)
		}
		out = append(out, label{name, b.String()})
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, ",") {
			s = s[1:]
		} else if !strings.HasPrefix(s, "}") {
			return nil, "", fmt.Errorf("%w: want , or } after label %s", ErrMetricsFormat, name)
		}
	}
}

// ScrapeOutcome is the outcome label of condisagg_pool_scrapes_total.
type ScrapeOutcome string

const (
	ScrapeOK         ScrapeOutcome = "ok"          // the page was read and parsed
	ScrapeHTTPError  ScrapeOutcome = "http_error"  // no answer, or a status other than 200
	ScrapeParseError ScrapeOutcome = "parse_error" // the page did not parse (ParseEngineMetrics)
)

// ScrapeTarget is one worker whose /metrics the shell (pool/probe) scrapes: GET MetricsPath
// at Endpoint, parsed with ParseEngineMetrics(body, Engine), reported with ApplyScrape.
type ScrapeTarget struct {
	ID       string
	Endpoint string // ip:port
	// Engine is the vLLM engine whose samples are the worker's: its data-parallel rank, or
	// -1 without data parallelism (every engine of the server is this worker's).
	Engine int
	w      *worker
}

// ScrapeTargets returns every discovered worker to scrape, decode workers first.
func (p *Pool) ScrapeTargets() []ScrapeTarget {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]ScrapeTarget, 0, len(p.byID))
	for _, ws := range [][]*worker{p.decode, p.prefill} {
		for _, w := range ws {
			engine := -1
			if w.dpSize > 1 {
				engine = w.rank
			}
			out = append(out, ScrapeTarget{ID: w.id, Endpoint: w.endpoint, Engine: engine, w: w})
		}
	}
	return out
}

// ApplyScrape counts one scrape of t by outcome and applies it: with err nil, s becomes the
// worker's scrape (stamped with the clock's now) and fills its unknown capacities; a failure
// counts towards UnhealthyAfter, and a success lifts that exclusion (README "Health" H6).
func (p *Pool) ApplyScrape(t ScrapeTarget, outcome ScrapeOutcome, s Scrape, err error) {
	p.m.Scrapes.WithLabelValues(t.ID, string(outcome)).Inc()
	p.applyScrape(t.w, s, err)
}

func (p *Pool) applyScrape(w *worker, s Scrape, err error) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.removed {
		return
	}
	reason := ReasonScrapeFailed
	if err != nil {
		w.scrapeFailures++
	} else {
		reason = ReasonScrapeRecovered
		w.scrapeFailures = 0
		s.At = now
		if s.BlockSize > 0 && s.BlockSize != int64(p.cfg.BlockSize) && s.BlockSize != w.scrape.BlockSize {
			// Every prefix hit on this worker would be lost (conditional-disagg.md §9.6).
			p.log.Warn("worker block size differs from --block-size; its prefix hits will not match",
				"worker", w.id, "expect", p.cfg.BlockSize, "err", fmt.Errorf("the engine's block size (vllm:cache_config_info block_size, sglang:page_size) is %d", s.BlockSize))
		}
		w.scrape = s
	}
	p.updateHealthLocked(w, reason, err)
	p.publishLocked(w)
}
