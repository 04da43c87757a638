package vllmsim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zeebo/xxh3"
)

// KVTransfer describes the NixlConnector side of a worker (--kv-transfer-config); a nil
// *KVTransfer means no connector, and kv_transfer_params are ignored as vLLM does.
type KVTransfer struct {
	Connector string // "NixlConnector"
	Role      string // kv_both, kv_producer, kv_consumer
	EngineID  string // remote_engine_id
	Host      string // remote_host (VLLM_NIXL_SIDE_CHANNEL_HOST)
	Port      int    // remote_port (VLLM_NIXL_SIDE_CHANNEL_PORT)
	// FailureRate is the share of decode legs (do_remote_prefill) whose KV read fails, in
	// [0, 1]; the choice is a hash of the request id, so a retried id fails again. A failed
	// leg is handled as FailurePolicy says (sim.Request.TransferFails, docs/disagg-truth.md).
	// Simulator only: vLLM has no such setting.
	FailureRate float64
	// FailurePolicy is vLLM's kv_load_failure_policy for a failed read: "fail" (vLLM's
	// default, and this one's when empty) ends the request with an error, HTTP 500 or an error
	// event in a stream; "recompute" computes the prompt again from the local hit.
	FailurePolicy string
}

// The values of KVTransfer.FailurePolicy (vLLM KVTransferConfig.kv_load_failure_policy).
const (
	FailurePolicyFail      = "fail"
	FailurePolicyRecompute = "recompute"
)

// transferFails says whether the decode leg with request id fails its KV read.
func (kt *KVTransfer) transferFails(id string) bool {
	switch {
	case kt.FailureRate <= 0:
		return false
	case kt.FailureRate >= 1:
		return true
	}
	return float64(xxh3.HashString(id)>>11)/(1<<53) < kt.FailureRate
}

// ServerConfig configures the OpenAI HTTP surface of a Worker.
type ServerConfig struct {
	ModelNames []string // served model names; the first is reported
	// LoRAModules are the LoRA adapters served besides the base model (vLLM --lora-modules
	// name=path); a request whose model is an adapter's name runs with it. They get the
	// engine ids 1, 2, … in this order, as vLLM numbers adapters it loads at startup.
	LoRAModules []LoRAModule
	MaxModelLen int // prompt + output tokens; default 131072
	Tokenizer   *tokenizer.Tokenizer
	Vocab       *Vocab
	Worker      *Worker
	// Workers are the data-parallel ranks (vLLM --data-parallel-size), rank r at index r;
	// nil means Worker alone. A request picks its rank by X-data-parallel-rank, else the
	// least loaded one.
	Workers      []*Worker
	KVTransfer   *KVTransfer
	PromptTokens bool // usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details)
	MaxBodyBytes int64
	Registry     *prometheus.Registry // /metrics; required
	Logger       *slog.Logger
}

// LoRAModule is one served LoRA adapter: the request model name and the adapter's path.
type LoRAModule struct {
	Name string
	Path string
}

// ParseLoRAModule parses vLLM's --lora-modules form name=path.
func ParseLoRAModule(s string) (LoRAModule, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(name) == "" || path == "" {
		return LoRAModule{}, fmt.Errorf("vllmsim: lora module %q: want name=path", s)
	}
	return LoRAModule{Name: name, Path: path}, nil
}

// Server is the vllm-sim HTTP handler: /v1/completions, /v1/chat/completions, /tokenize,
// /detokenize, /health, /v1/models, /reset_prefix_cache and /metrics.
type Server struct {
	cfg   ServerConfig
	m     *serverMetrics
	mux   *http.ServeMux
	ranks *ranks
	lora  map[string]sim.Adapter // adapter name -> engine adapter
}

// NewServer builds the handler and registers the vllm: metrics on cfg.Registry.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Tokenizer == nil || cfg.Vocab == nil || cfg.Worker == nil || cfg.Registry == nil || len(cfg.ModelNames) == 0 {
		return nil, errors.New("vllmsim: server config: Tokenizer, Vocab, Worker, Registry and ModelNames are required")
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 131072
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Workers) == 0 {
		cfg.Workers = []*Worker{cfg.Worker}
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), ranks: newRanks(cfg.Workers), lora: map[string]sim.Adapter{}}
	for i, l := range cfg.LoRAModules {
		if _, dup := s.lora[l.Name]; dup || s.baseModel(l.Name) {
			return nil, fmt.Errorf("vllmsim: server config: lora module %q: name already served", l.Name)
		}
		s.lora[l.Name] = sim.Adapter{ID: int64(i + 1), Name: l.Name, Path: l.Path}
	}
	m, err := newServerMetrics(cfg.Registry, cfg.ModelNames[0], cfg.Workers, cfg.KVTransfer != nil)
	if err != nil {
		return nil, err
	}
	s.m = m
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("POST /detokenize", s.detokenize)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /reset_prefix_cache", s.resetPrefixCache)
	s.handleReceived()
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// genRequest holds the body fields of /v1/completions and /v1/chat/completions the simulator
// uses; the prompt itself is encoded by the tokenizer package from the raw body.
type genRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	IgnoreEOS           bool              `json:"ignore_eos"`
	N                   *int              `json:"n"`
	Prompt              json.RawMessage   `json:"prompt"`
	KVTransferParams    *kvTransferParams `json:"kv_transfer_params"`
}

type kvTransferParams struct {
	DoRemoteDecode  bool `json:"do_remote_decode"`
	DoRemotePrefill bool `json:"do_remote_prefill"`
	// RemotePrefillCachedTokens is the prefill worker's own hit that vLLM 0.32 adds to the
	// params it returns; a decode leg that carries it reports it as its cached_tokens
	// (OutputProcessor: `isinstance(cached, int)`, so true and false count as 1 and 0).
	RemotePrefillCachedTokens json.RawMessage `json:"remote_prefill_cached_tokens"`
}

// reportedCached returns the cached-token count a decode leg with these params reports instead
// of its own, if any.
func (kv *kvTransferParams) reportedCached() (int, bool) {
	if kv == nil || !kv.DoRemotePrefill {
		return 0, false
	}
	switch raw := string(kv.RemotePrefillCachedTokens); raw {
	case "true":
		return 1, true
	case "false":
		return 0, true
	default:
		n, err := strconv.Atoi(raw)
		return n, err == nil
	}
}

// generationError is the message of vLLM's answer to a request the engine failed.
const generationError = "Internal server error"

// apiError writes vLLM's OpenAI error body.
func apiError(w http.ResponseWriter, code int, msg string) { apiErrorParam(w, code, msg, nil) }

// apiErrorParam is apiError naming the offending request field (nil: none).
func apiErrorParam(w http.ResponseWriter, code int, msg string, param *string) {
	typ := map[int]string{400: "BadRequestError", 404: "NotFoundError", 413: "BadRequestError", 503: "ServiceUnavailableError"}[code]
	if typ == "" {
		typ = "InternalServerError"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": code}})
}

// unknownModel writes vLLM's answer for a model it does not serve (404, param "model").
func unknownModel(w http.ResponseWriter, name string) {
	param := "model"
	apiErrorParam(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", name), &param)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			apiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", s.cfg.MaxBodyBytes))
		} else {
			apiError(w, http.StatusBadRequest, "read body: "+err.Error())
		}
		return nil, false
	}
	return body, true
}

// servedModel resolves a request's model: "" or a served name is the base model (the zero
// Adapter), an adapter's name that adapter; ok is false for any other name.
func (s *Server) servedModel(name string) (sim.Adapter, bool) {
	if name == "" || s.baseModel(name) {
		return sim.Adapter{}, true
	}
	a, ok := s.lora[name]
	return a, ok
}

func (s *Server) baseModel(name string) bool {
	for _, n := range s.cfg.ModelNames {
		if n == name {
			return true
		}
	}
	return false
}

func requestID(r *http.Request, prefix string) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 256 {
		return prefix + id
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// prepared is a parsed generation request ready for the engine.
type prepared struct {
	body      genRequest
	chat      bool
	id        string
	prompt    []uint32
	req       sim.Request
	includeUs bool
}

func (s *Server) prepare(w http.ResponseWriter, r *http.Request, chat bool) (*prepared, bool) {
	raw, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	p := &prepared{chat: chat}
	if err := json.Unmarshal(raw, &p.body); err != nil {
		apiError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return nil, false
	}
	adapter, ok := s.servedModel(p.body.Model)
	if !ok {
		unknownModel(w, p.body.Model)
		return nil, false
	}
	if p.body.N != nil && *p.body.N != 1 {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("n = %d: the simulator generates one choice", *p.body.N))
		return nil, false
	}
	var err error
	if chat {
		p.prompt, err = s.cfg.Tokenizer.EncodeChat(nil, raw, tokenizer.ChatOptions{})
	} else {
		p.prompt, err = s.cfg.Tokenizer.EncodeCompletion(nil, raw)
	}
	if err != nil || len(p.prompt) == 0 {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("prompt: %v", err))
		return nil, false
	}
	if !s.fillRequest(w, p) {
		return nil, false
	}
	p.req.LoRA = adapter
	p.id = requestID(r, map[bool]string{true: "chatcmpl-", false: "cmpl-"}[chat])
	if p.req.RemotePrefill && s.cfg.KVTransfer.transferFails(p.id) {
		p.req.TransferFails = true
		p.req.FailOnTransferError = s.cfg.KVTransfer.FailurePolicy != FailurePolicyRecompute
	}
	p.includeUs = p.body.StreamOptions != nil && p.body.StreamOptions.IncludeUsage
	return p, true
}

// fillRequest sets the engine request: output length, finish reason, P/D role.
func (s *Server) fillRequest(w http.ResponseWriter, p *prepared) bool {
	room := s.cfg.MaxModelLen - len(p.prompt)
	maxTok := p.body.MaxTokens
	if p.body.MaxCompletionTokens != nil {
		maxTok = p.body.MaxCompletionTokens
	}
	seed := xxh3.HashSeed(u32bytes(p.prompt), 7)
	req := sim.Request{Prompt: p.prompt}
	switch {
	case maxTok != nil && *maxTok >= 1:
		req.MaxTokens = *maxTok
	case maxTok != nil:
		apiError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens = %d: must be at least 1", *maxTok))
		return false
	case p.body.IgnoreEOS:
		req.MaxTokens = room
	default:
		req.MaxTokens, req.StopReason = 16+int(seed%113), sim.FinishStop // the "model" ends the answer
	}
	if req.MaxTokens > room {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.cfg.MaxModelLen, len(p.prompt)+req.MaxTokens, len(p.prompt), req.MaxTokens))
		return false
	}
	bareFirst := p.chat || promptEndsInSpace(p.body.Prompt)
	req.Output = s.cfg.Vocab.Output(seed, bareFirst)
	if kv := p.body.KVTransferParams; kv != nil && s.cfg.KVTransfer != nil {
		req.PrefillOnly = kv.DoRemoteDecode
		req.RemotePrefill = kv.DoRemotePrefill && !kv.DoRemoteDecode
	}
	p.req = req
	return true
}

func u32bytes(ids []uint32) []byte {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return b
}

// promptEndsInSpace reports whether a string completion prompt ends in white space (the first
// output word then carries no leading space).
func promptEndsInSpace(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var list []string
		if json.Unmarshal(raw, &list) != nil || len(list) != 1 {
			return false
		}
		s = list[0]
	}
	return s != "" && strings.ContainsAny(s[len(s)-1:], " \n\t\r")
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	p, ok := s.prepare(w, r, chat)
	if !ok {
		return
	}
	rank, err := s.ranks.pick(r.Header)
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	defer s.ranks.done(rank)
	worker := s.ranks.workers[rank]
	arrival := time.Now()
	st, err := worker.Submit(r.Context(), p.req)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, sim.ErrTooLong) {
			code = http.StatusBadRequest
		}
		apiError(w, code, err.Error())
		return
	}
	ctx := r.Context()
	out := outputs{rank: rank}
	if p.body.Stream {
		err = s.stream(ctx, w, p, st, &out)
	} else {
		err = s.collect(ctx, st, &out)
		switch {
		case err == nil && out.fin.Reason == sim.FinishError:
			// vLLM's GenerationError for an "error" finish reason (serving.py _raise_if_error).
			apiError(w, http.StatusInternalServerError, generationError)
		case err == nil:
			s.respond(w, p, &out)
		}
	}
	if err != nil {
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = worker.Abort(abortCtx, st.ID)
		return
	}
	s.m.observeEnd(&out, arrival, s.cfg.Worker.cfg.TimeScale)
}

// outputs accumulates one request's tokens and timings.
type outputs struct {
	rank  int // data-parallel rank serving the request
	toks  []uint32
	fin   *sim.Finished
	first time.Time
	last  time.Time
}

func (s *Server) next(ctx context.Context, st *Stream, out *outputs) ([]uint32, error) {
	toks, fin, err := st.Next(ctx, len(out.toks))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if len(toks) > 0 {
		if out.first.IsZero() {
			out.first = now
		} else {
			s.m.itl[out.rank].Observe(now.Sub(out.last).Seconds() * s.cfg.Worker.cfg.TimeScale)
		}
		out.last = now
	}
	out.toks = append(out.toks, toks...)
	out.fin = fin
	return toks, nil
}

func (s *Server) collect(ctx context.Context, st *Stream, out *outputs) error {
	for out.fin == nil {
		if _, err := s.next(ctx, st, out); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	raw, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var probe struct {
		Model          string          `json:"model"`
		Messages       json.RawMessage `json:"messages"`
		ReturnTokStrs  bool            `json:"return_token_strs"`
		AddGenPrompt   *bool           `json:"add_generation_prompt"`
		ContinueFinal  bool            `json:"continue_final_message"`
		AddSpecialToks *bool           `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		apiError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if _, ok := s.servedModel(probe.Model); !ok {
		unknownModel(w, probe.Model)
		return
	}
	var toks []uint32
	var err error
	if len(probe.Messages) > 0 {
		if probe.ContinueFinal && (probe.AddGenPrompt == nil || *probe.AddGenPrompt) {
			apiError(w, http.StatusBadRequest, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
			return
		}
		toks, err = s.cfg.Tokenizer.EncodeChat(nil, raw, tokenizer.ChatOptions{})
	} else {
		toks, err = s.cfg.Tokenizer.EncodeCompletion(nil, raw)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "tokenize: "+err.Error())
		return
	}
	if toks == nil {
		toks = []uint32{}
	}
	writeJSON(w, map[string]any{"count": len(toks), "max_model_len": s.cfg.MaxModelLen, "tokens": toks, "token_strs": nil})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen *int    `json:"max_model_len"`
	}
	data := make([]model, 0, len(s.cfg.ModelNames)+len(s.cfg.LoRAModules))
	now := time.Now().Unix()
	for _, n := range s.cfg.ModelNames {
		data = append(data, model{ID: n, Object: "model", Created: now, OwnedBy: "vllm", Root: s.cfg.ModelNames[0], MaxModelLen: &s.cfg.MaxModelLen})
	}
	for _, l := range s.cfg.LoRAModules { // as vLLM lists an adapter: root its path, parent the base model
		data = append(data, model{ID: l.Name, Object: "model", Created: now, OwnedBy: "vllm", Root: l.Path, Parent: &s.cfg.ModelNames[0]})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func (s *Server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	for _, wk := range s.cfg.Workers { // every engine, as vLLM resets all of them
		if err := wk.ResetPrefixCache(r.Context()); err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, sim.ErrBlocksInUse) {
				code = http.StatusBadRequest
			}
			apiError(w, code, "reset prefix cache: "+err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// detokenize is vLLM's POST /detokenize: {"model", "tokens"} -> {"prompt"}.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	raw, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		Model  string    `json:"model"`
		Tokens *[]uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if _, ok := s.servedModel(req.Model); !ok {
		unknownModel(w, req.Model)
		return
	}
	if req.Tokens == nil {
		param := "tokens"
		apiErrorParam(w, http.StatusBadRequest, "tokens: field required", &param)
		return
	}
	text, err := s.cfg.Tokenizer.Decode(*req.Tokens)
	if err != nil {
		apiError(w, http.StatusBadRequest, "detokenize: "+err.Error())
		return
	}
	writeJSON(w, map[string]any{"prompt": text})
}
