package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/condisagg/condisagg/internal/splitmix"
)

// Config configures an Engine. Zero fields take the defaults of WithDefaults.
type Config struct {
	BlockSize           int       // tokens per KV block; default 16
	NumGPUBlocks        int       // KV capacity in blocks; default Model.NumGPUBlocks
	MaxNumBatchedTokens int       // token budget of one step; default 8192
	MaxNumSeqs          int       // running sequences; default 1024
	Model               CostModel // step-time and transfer coefficients; default llama3.1-8b-h100
	Seed                uint64    // seeds block hashes and default output tokens
	// Events turns KV event collection on (StepResult.Events, TakeEvents).
	Events bool
}

// Defaults of Config (vLLM's OpenAI-server defaults on an H100, perf-model.md §3).
const (
	DefaultBlockSize           = 16
	DefaultMaxNumBatchedTokens = 8192
	DefaultMaxNumSeqs          = 1024
	DefaultPerfModel           = "llama3.1-8b-h100"
)

// WithDefaults returns c with every zero field set to its default. New and Validate apply it
// themselves; a shell that reports the configuration it runs (block size, capacity) calls it too.
func (c Config) WithDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Model.Name == "" && c.Model.T0 == 0 {
		c.Model, _ = PerfModel(DefaultPerfModel)
	}
	if c.NumGPUBlocks == 0 {
		c.NumGPUBlocks = c.Model.NumGPUBlocks
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	return c
}

// Validate returns every problem of c (after defaults), joined.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.BlockSize < 1 || c.BlockSize > 1<<16 {
		errs = append(errs, fmt.Errorf("block_size: %d is outside [1, 65536]", c.BlockSize))
	}
	if c.NumGPUBlocks < 1 || c.NumGPUBlocks > 1<<30 {
		errs = append(errs, fmt.Errorf("num_gpu_blocks: %d is outside [1, 2^30]", c.NumGPUBlocks))
	}
	if c.MaxNumBatchedTokens < 1 {
		errs = append(errs, fmt.Errorf("max_num_batched_tokens: %d must be >= 1", c.MaxNumBatchedTokens))
	}
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max_num_seqs: %d must be >= 1", c.MaxNumSeqs))
	}
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RequestID identifies a request inside one Engine; Add assigns them in increasing order.
type RequestID uint64

// Request is one generation request.
type Request struct {
	Prompt    []uint32 // prompt token ids, at least one; the engine keeps the slice
	MaxTokens int      // output tokens to generate, >= 1
	// Output returns the i-th output token (i from 0). nil draws deterministic pseudo-tokens
	// from Config.Seed and the request id.
	Output func(i int) uint32
	// StopReason is the finish reason reported when MaxTokens is reached: FinishLength (the
	// zero value means FinishLength) or FinishStop (the model "chose" to end there).
	StopReason FinishReason
	// PrefillOnly (NixlConnector do_remote_decode) finishes after the first token with
	// FinishLength and reports the request's block ids.
	PrefillOnly bool
	// RemotePrefill (NixlConnector do_remote_prefill) receives the prompt's KV that is not in
	// the local prefix cache by a simulated transfer (CostModel.TransferTime), then computes only
	// the last prompt token.
	RemotePrefill bool
	// TransferFails makes a RemotePrefill request's transfer fail as a NIXL read can: the
	// transfer time passes, then every block it was to receive is invalid and, as vLLM's
	// kv_load_failure_policy "recompute" does (Scheduler._update_requests_with_invalid_blocks),
	// the request is computed from its local prefix-cache hit, which is all it reports cached.
	TransferFails bool
	// FailOnTransferError is vLLM's kv_load_failure_policy "fail" (its default): a failed
	// transfer ends the request with FinishError and no output instead of recomputing it.
	FailOnTransferError bool
	// LoRA is the adapter the request runs with (the zero Adapter: the base model). Its
	// blocks hash apart from the base model's and other adapters' (vLLM adds the adapter to
	// every block's extra keys), and its BlockStored events name it.
	LoRA Adapter
}

// Adapter is a LoRA adapter as vLLM identifies it: the integer id the engine gave it when it
// loaded, its name and its path (part of vLLM's block hash, never published).
type Adapter struct {
	ID   int64
	Name string
	Path string
}

// FinishReason says why a request ended (OpenAI finish_reason).
type FinishReason uint8

const (
	FinishLength FinishReason = iota // max_tokens reached
	FinishStop                       // end of sequence
	FinishAbort                      // aborted by the caller
	FinishError                      // the engine failed the request (a KV load under kv_load_failure_policy "fail")
)

func (f FinishReason) String() string {
	switch f {
	case FinishLength:
		return "length"
	case FinishStop:
		return "stop"
	case FinishError:
		return "error"
	default:
		return "abort"
	}
}

// Errors of Add, Abort and ResetPrefixCache.
var (
	ErrEmptyPrompt    = errors.New("sim: empty prompt")
	ErrTooLong        = errors.New("sim: request does not fit the KV cache")
	ErrUnknownRequest = errors.New("sim: unknown request")
	ErrBlocksInUse    = errors.New("sim: KV blocks in use")
)

type reqState uint8

const (
	stWaiting reqState = iota + 1
	stTransferring
	stRunning
	stDone
)

// request is the engine's state of one request. tokens holds the prompt followed by the output
// tokens sampled so far; computed of them have KV in blocks.
type request struct {
	id        RequestID
	tokens    []uint32
	promptLen int
	maxTokens int
	out       func(int) uint32
	stop      FinishReason
	numOut    int
	computed  int
	blocks    []int32
	hashes    []uint64 // chain hashes of the full blocks of tokens, computed on demand
	numCached int      // blocks [0, numCached) are in the prefix cache
	cachedTok int      // prefix-cache hit of the first admission (tokens)
	admitted  bool     // admitted at least once (prefix-cache metrics count once)
	state     reqState
	prefill   bool // PrefillOnly
	remote    bool // RemotePrefill, KV not yet received
	xferFail  bool // TransferFails
	// xferFailHard: FailOnTransferError
	xferFailHard bool
	readyAt      time.Duration
	xferTokens   int           // tokens the transfer fills
	xferTime     time.Duration // its duration
	lora         Adapter
	loraKey      uint64 // mixed into every block hash; 0 for the base model
}

// Stats is a snapshot of the engine's gauges and counters.
type Stats struct {
	Running, Waiting, Transferring int
	UsedBlocks, NumGPUBlocks       int
	PrefixQueries, PrefixHits      uint64 // tokens (vllm:prefix_cache_queries/hits)
	Preemptions                    uint64
	PromptTokens, GenerationTokens uint64
	Steps                          uint64
	// KV transfers received (RemotePrefill) that completed, their summed duration and bytes
	// (vLLM's NixlConnector vllm:nixl_xfer_time_seconds and vllm:nixl_bytes_transferred):
	// each takes CostModel.TransferTime of the tokens it filled and moves BytesPerToken each.
	KVTransfers     uint64
	KVTransferTime  time.Duration
	KVTransferBytes float64
}

// KVUsage is the fraction of KV blocks in use (vllm:kv_cache_usage_perc).
func (s Stats) KVUsage() float64 {
	if s.NumGPUBlocks == 0 {
		return 0
	}
	return float64(s.UsedBlocks) / float64(s.NumGPUBlocks)
}

// Engine is a deterministic, clock-free vLLM v1 engine core: a waiting queue, a running batch,
// a paged KV cache with prefix caching, and a scheduler with chunked prefill. Time enters only
// as the now argument of Step; the caller advances it by each step's Duration (real time in
// vllm-sim, virtual time in a discrete-event simulator).
//
// An Engine is not safe for concurrent use: one goroutine owns it.
type Engine struct {
	cfg      Config
	pool     *blockPool
	reqs     map[RequestID]*request
	nextID   RequestID
	waiting  []*request // FCFS; preempted and transferred requests go to the head
	running  []*request // admission order
	xfer     []*request // waiting for remote KV
	stats    Stats
	res      StepResult
	events   []Event // pending events (reset, between steps)
	hashArea []uint64
	sched    []scheduled
	hbuf     [8 + 4*64]byte
}

type scheduled struct {
	r *request
	n int
}

// New returns an empty engine.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: engine config: %w", err)
	}
	cfg = cfg.WithDefaults()
	return &Engine{
		cfg:  cfg,
		pool: newBlockPool(cfg.NumGPUBlocks),
		reqs: make(map[RequestID]*request),
	}, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a request and returns its id. It fails when the prompt is empty or when prompt
// plus output can never fit the KV cache.
func (e *Engine) Add(req Request) (RequestID, error) {
	if len(req.Prompt) == 0 {
		return 0, ErrEmptyPrompt
	}
	maxTok := max(req.MaxTokens, 1)
	if req.PrefillOnly {
		maxTok = 1
	}
	if need := e.blocksFor(len(req.Prompt) + maxTok); need > e.cfg.NumGPUBlocks {
		return 0, fmt.Errorf("%w: %d prompt + %d output tokens need %d blocks, capacity %d",
			ErrTooLong, len(req.Prompt), maxTok, need, e.cfg.NumGPUBlocks)
	}
	e.nextID++
	r := &request{
		id: e.nextID, tokens: req.Prompt, promptLen: len(req.Prompt), maxTokens: maxTok,
		out: req.Output, stop: req.StopReason, state: stWaiting,
		prefill: req.PrefillOnly, remote: req.RemotePrefill, lora: req.LoRA,
		xferFail: req.RemotePrefill && req.TransferFails, xferFailHard: req.FailOnTransferError,
	}
	if req.LoRA.Name != "" {
		r.loraKey = loraKey(req.LoRA)
	}
	if r.stop == FinishAbort || r.stop == FinishError {
		r.stop = FinishLength
	}
	if r.out == nil {
		seed, id := e.cfg.Seed, uint64(r.id)
		r.out = func(i int) uint32 { return PseudoToken(seed, id, i) }
	}
	e.reqs[r.id] = r
	e.waiting = append(e.waiting, r)
	return r.id, nil
}

// PseudoToken is the default output token i of request id: a deterministic draw in
// [1000, 30000), clear of special tokens in common vocabularies.
func PseudoToken(seed, id uint64, i int) uint32 {
	x := splitmix.Mix64(seed ^ (id * splitmix.Gamma) + uint64(i))
	return 1000 + uint32(x%29000)
}

// Abort removes a request wherever it is; its blocks are freed (and stay cached). The next
// Step does not report it.
func (e *Engine) Abort(id RequestID) error {
	r, ok := e.reqs[id]
	if !ok {
		return fmt.Errorf("%w: id %d", ErrUnknownRequest, id)
	}
	switch r.state {
	case stWaiting:
		e.waiting = removeReq(e.waiting, r)
	case stRunning:
		e.running = removeReq(e.running, r)
	case stTransferring:
		e.xfer = removeReq(e.xfer, r)
	}
	e.freeBlocks(r)
	r.state = stDone
	delete(e.reqs, id)
	return nil
}

func removeReq(q []*request, r *request) []*request {
	for i, x := range q {
		if x == r {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// ResetPrefixCache drops every cached block and queues an AllBlocksCleared event. Like vLLM it
// fails, changing nothing, while any block is in use.
func (e *Engine) ResetPrefixCache() error {
	if e.pool.inUse() {
		return fmt.Errorf("%w: %d of %d blocks", ErrBlocksInUse, e.pool.size()-e.pool.numFree, e.pool.size())
	}
	e.pool.reset()
	if e.cfg.Events {
		e.events = append(e.events, Event{Kind: EventAllBlocksCleared})
	}
	return nil
}

// TakeEvents returns the events produced outside a step (ResetPrefixCache) and forgets them.
// The slice is valid until the next call of any Engine method.
func (e *Engine) TakeEvents() []Event {
	ev := e.events
	e.events = e.events[:0]
	return ev
}

// Stats returns a snapshot of the engine's gauges and counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running, s.Waiting, s.Transferring = len(e.running), len(e.waiting), len(e.xfer)
	s.NumGPUBlocks = e.pool.size()
	s.UsedBlocks = s.NumGPUBlocks - e.pool.numFree
	return s
}

// Idle reports whether no request is queued, running or transferring.
func (e *Engine) Idle() bool { return len(e.reqs) == 0 }

// NextTransfer returns when the earliest KV transfer in flight completes.
func (e *Engine) NextTransfer() (time.Duration, bool) {
	if len(e.xfer) == 0 {
		return 0, false
	}
	t := e.xfer[0].readyAt
	for _, r := range e.xfer[1:] {
		t = min(t, r.readyAt)
	}
	return t, true
}

func (e *Engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

func (e *Engine) freeBlocks(r *request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
	r.numCached = 0
}
