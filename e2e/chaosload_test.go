package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/envoy"
)

// chatPath is the endpoint every chaos request targets unless it says otherwise.
const chatPath = "/v1/chat/completions"

// chaosReq is one request the chaos suite sends: what to send, how to behave as a client, and
// what the router promises for it.
type chaosReq struct {
	kind   string // names the request in reports and errors
	via    *envoy.Process
	path   string // default chatPath; sent as written (percent-encoding kept)
	body   []byte
	header http.Header
	// upload, when set, writes the body instead (slowly, or abandoning it); the request then
	// has no body field. contentLength announces len(body) instead of chunked encoding.
	upload        func(ctx context.Context, w io.Writer) error
	contentLength bool
	// The client gives up (closes its connection): cancelAfter > 0 once that many SSE data
	// events have arrived, cancelOnHeaders as soon as the response headers have, cancelAt > 0
	// that long after sending, whatever has arrived.
	cancelAfter     int
	cancelOnHeaders bool
	cancelAt        time.Duration
	// expect returns "" when the outcome is the one the router promises, else what is wrong.
	expect func(r *chaosResult) string
}

// chaosResult is what one chaosReq got.
type chaosResult struct {
	kind       string
	via        string // "buffered" or "duplex"
	start, end time.Time
	status     int
	errCode    string // x-condisagg-error, or the code of an OpenAI JSON error body
	decision   string // x-condisagg-decision ("" when the router made none)
	events     int    // SSE data events before [DONE]
	done       bool   // [DONE] arrived
	content    bool   // some event carried generated text
	text       string // the generated text (multi-turn clients send it back)
	body       []byte // a non-SSE answer (errors), at most 4 KiB
	err        string // transport or read error
	cancelled  bool   // the client cancelled on purpose
	problem    string // expect's verdict
}

// ok is the plain success: a complete stream with generated text.
func (r *chaosResult) ok() bool {
	return r.status == http.StatusOK && r.done && r.content && r.err == ""
}

func (r *chaosResult) String() string {
	s := fmt.Sprintf("%s via %s at %s: status %d", r.kind, r.via, r.start.Format("15:04:05.000"), r.status)
	if r.errCode != "" {
		s += " " + r.errCode
	}
	if r.err != "" {
		s += " err=" + r.err
	}
	if r.decision != "" {
		s += " decision=" + r.decision
	}
	s += fmt.Sprintf(" events=%d done=%v (%s)", r.events, r.done, r.end.Sub(r.start).Round(time.Millisecond))
	if len(r.body) > 0 {
		s += fmt.Sprintf(" body=%.200q", r.body)
	}
	return s
}

// Expectations.

// expectOK: the router promises a complete answer.
func expectOK(r *chaosResult) string {
	if r.ok() {
		return ""
	}
	return "not a complete stream"
}

// expectFullGeneration: a complete answer of at least minEvents events, so a smuggled
// do_remote_decode (one token, then the KV handed out) was not acted on.
func expectFullGeneration(minEvents int) func(*chaosResult) string {
	return func(r *chaosResult) string {
		if p := expectNotActedOn(minEvents)(r); p != "" {
			return p
		}
		if r.decision == "" {
			return "no decision header: the router did not route it"
		}
		return ""
	}
}

// expectNotActedOn: a complete answer of at least minEvents events, routed or not: a
// smuggled do_remote_decode was not acted on.
func expectNotActedOn(minEvents int) func(*chaosResult) string {
	return func(r *chaosResult) string {
		if !r.ok() {
			return "not a complete stream"
		}
		if r.events < minEvents {
			return fmt.Sprintf("%d events, want >= %d: the worker acted on client kv_transfer_params", r.events, minEvents)
		}
		return ""
	}
}

// expectError: Envoy or the router refuses the request with status and, when code is set,
// that OpenAI error code.
func expectError(status int, code string) func(*chaosResult) string {
	return func(r *chaosResult) string {
		if r.status != status || (code != "" && r.errCode != code) {
			return fmt.Sprintf("want %d %s", status, code)
		}
		return ""
	}
}

// expectRoutedError: the router decided (its decision echoed) and the worker refused the
// request with status.
func expectRoutedError(status int) func(*chaosResult) string {
	return func(r *chaosResult) string {
		if r.status != status {
			return fmt.Sprintf("want %d from the worker", status)
		}
		if r.decision == "" {
			return "no decision header: the router did not decide (Envoy's message_timeout?)"
		}
		return ""
	}
}

// expectRefusedByEnvoy: Envoy's HTTP/1 codec refuses the request (headers it will not take):
// it logs status but closes the connection without an answer, so the client sees either
// status or no response at all. That Envoy logged the refusal is checked apart, in its
// access log (refusedByEnvoy).
func expectRefusedByEnvoy(status int) func(*chaosResult) string {
	return func(r *chaosResult) string {
		if r.status == status || (r.status == 0 && r.err != "") {
			return ""
		}
		return fmt.Sprintf("want %d or the connection closed", status)
	}
}

// expectCancelled: the client gave up on purpose; whatever it saw before is fine unless the
// server had already answered with an error.
func expectCancelled(r *chaosResult) string {
	if r.status >= 500 {
		return "server error before the client went away"
	}
	return ""
}

// chaosClient sends chaos requests through the stack's Envoys and keeps every result.
type chaosClient struct {
	s       *Stack
	http    *http.Client
	timeout time.Duration

	mu      sync.Mutex
	results []*chaosResult

	inflight, peak atomic.Int64
	seed           atomic.Uint64

	// named are the names of Envoys other than the stack's two (set before the load starts).
	named map[*envoy.Process]string
}

func newChaosClient(s *Stack, timeout time.Duration) *chaosClient {
	c := &chaosClient{s: s, timeout: timeout, http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second, DisableCompression: true}}}
	c.seed.Store(1 << 20) // clear of the seeds the other e2e tests use
	return c
}

// close drops the idle connections (the leak check counts their goroutines).
func (c *chaosClient) close() { c.http.CloseIdleConnections() }

// nextSeed returns a seed no other request of the run uses: its prompt shares no prefix.
func (c *chaosClient) nextSeed() uint64 { return c.seed.Add(1) }

// take returns and forgets the results recorded so far.
func (c *chaosClient) take() []*chaosResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.results
	c.results = nil
	return out
}

// peekResults returns the results recorded so far, keeping them.
func (c *chaosClient) peekResults() []*chaosResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*chaosResult(nil), c.results...)
}

func (c *chaosClient) viaName(env *envoy.Process) string {
	if n, ok := c.named[env]; ok {
		return n
	}
	if env == c.s.EnvoyDuplex {
		return "duplex"
	}
	return "buffered"
}

// nameEnvoy names env, an Envoy of the test's own, in the results' reports.
func (c *chaosClient) nameEnvoy(env *envoy.Process, name string) {
	if c.named == nil {
		c.named = map[*envoy.Process]string{}
	}
	c.named[env] = name
}

// do sends one request, records its result and returns it. The request has its own deadline
// and does not end with the load that sent it: a stopped load lets its streams finish.
func (c *chaosClient) do(q chaosReq) *chaosResult {
	n := c.inflight.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	r := c.send(q)
	c.inflight.Add(-1)
	if q.expect != nil {
		r.problem = q.expect(r)
	}
	c.mu.Lock()
	c.results = append(c.results, r)
	c.mu.Unlock()
	return r
}

func (c *chaosClient) send(q chaosReq) *chaosResult {
	r := &chaosResult{kind: q.kind, via: c.viaName(q.via)}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	path := q.path
	if path == "" {
		path = chatPath
	}
	var cancelled atomic.Bool // set before each deliberate cancel; read once the request is over
	defer func() { r.cancelled = cancelled.Load() }()
	giveUp := func() { cancelled.Store(true); cancel() }
	var body io.Reader = bytes.NewReader(q.body)
	var pw *io.PipeWriter
	if q.upload != nil {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		body = pr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+q.via.ListenerAddr("llm")+path, body)
	if err != nil {
		r.start, r.end, r.err = time.Now(), time.Now(), err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range q.header {
		req.Header[k] = append([]string(nil), vs...) // as given: case and repeats kept
	}
	if q.upload != nil {
		req.ContentLength = -1
		if q.contentLength {
			req.ContentLength = int64(len(q.body))
		}
		go func() {
			err := q.upload(ctx, pw)
			if errors.Is(err, errAbandoned) {
				cancelled.Store(true)
			}
			pw.CloseWithError(err)
		}()
	}
	if q.cancelAt > 0 {
		t := time.AfterFunc(q.cancelAt, giveUp)
		defer t.Stop()
	}
	r.start = time.Now()
	defer func() { r.end = time.Now() }()
	resp, err := c.http.Do(req)
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	r.decision = resp.Header.Get("x-condisagg-decision")
	r.errCode = resp.Header.Get("x-condisagg-error")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r.body, err = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if err != nil {
			r.err = err.Error()
		}
		var e apiError
		if r.errCode == "" && json.Unmarshal(r.body, &e) == nil {
			r.errCode = e.Error.Code
		}
		if r.status == http.StatusOK { // a non-streamed answer counts as a complete one
			r.done, r.content = err == nil, len(r.body) > 0
		}
		return r
	}
	if q.cancelOnHeaders {
		giveUp()
		return r
	}
	r.readSSE(resp.Body, q.cancelAfter, giveUp, &cancelled)
	return r
}

// readSSE reads an event stream, counting data events; cancelAfter > 0 gives up once that
// many events have arrived.
func (r *chaosResult) readSSE(body io.Reader, cancelAfter int, giveUp func(), cancelled *atomic.Bool) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 16<<10), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			r.done = true
			continue
		}
		r.events++
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &ev) == nil {
			for _, ch := range ev.Choices {
				if ch.Delta.Content != "" {
					r.content = true
					text.WriteString(ch.Delta.Content)
				}
			}
		}
		if cancelAfter > 0 && r.events >= cancelAfter {
			giveUp()
			break
		}
	}
	r.text = text.String()
	if err := sc.Err(); err != nil && !cancelled.Load() {
		r.err = err.Error()
	}
	if !r.done && r.err == "" && !cancelled.Load() {
		r.err = "stream ended without [DONE]"
	}
}

// chaosLoad is a closed-loop load: each client holds one request in flight at a time, and
// runs two-turn conversations (a fresh prompt, which goes remote by the ratio rule, then a
// follow-up that bypasses to the worker holding turn 1).
type chaosLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// startLoad starts clients conversations spread over envs, their starts staggered over
// ramp so the first decisions do not all queue behind one another.
func (c *chaosClient) startLoad(clients int, envs []*envoy.Process, ramp time.Duration, maxTokens int) *chaosLoad {
	l := &chaosLoad{stop: make(chan struct{})}
	for i := range clients {
		env := envs[i%len(envs)]
		delay := ramp * time.Duration(i) / time.Duration(max(clients, 1))
		l.wg.Go(func() {
			select {
			case <-time.After(delay):
			case <-l.stop:
				return
			}
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				c.conversation(env, maxTokens, l.stop)
			}
		})
	}
	return l
}

// end stops starting requests and waits until every request in flight has ended.
func (l *chaosLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// failureBackoff is how long a load client waits after a failed request.
const failureBackoff = 250 * time.Millisecond

// conversation sends a fresh prompt of 40 to 300 words and, if it succeeds and the load goes
// on, one follow-up turn.
func (c *chaosClient) conversation(env *envoy.Process, maxTokens int, stop <-chan struct{}) {
	seed := c.nextSeed()
	msgs := []Message{{Role: "user", Content: Words(seed, 40+int(seed%261))}}
	r := c.do(chaosReq{kind: "chat", via: env, body: ChatBody(msgs, maxTokens), expect: expectOK})
	if !r.ok() {
		// A client backs off after a failure (a 503 asks for 1 s); without that, a fault that
		// fails requests at once turns the closed loop into a flood of retries.
		select {
		case <-time.After(failureBackoff):
		case <-stop:
		}
		return
	}
	select {
	case <-stop:
		return
	default:
	}
	msgs = nextTurn(msgs, r.text, c.nextSeed(), 30)
	c.do(chaosReq{kind: "chat_turn2", via: env, body: ChatBody(msgs, maxTokens), expect: expectOK})
}

// slowUpload writes body in pieces spread over d; abandonAt in (0, 1) stops after that
// fraction with an error, which makes the client drop the connection mid-body.
func slowUpload(body []byte, pieces int, d time.Duration, abandonAt float64) func(context.Context, io.Writer) error {
	return func(ctx context.Context, w io.Writer) error {
		for i := range pieces {
			if abandonAt > 0 && float64(i) >= abandonAt*float64(pieces) {
				return errAbandoned
			}
			lo, hi := len(body)*i/pieces, len(body)*(i+1)/pieces
			if _, err := w.Write(body[lo:hi]); err != nil {
				return err
			}
			select {
			case <-time.After(d / time.Duration(pieces)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

var errAbandoned = errors.New("chaos: upload abandoned by the client")
