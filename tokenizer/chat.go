package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/condisagg/condisagg/internal/reqjson"
)

// ErrRequestTemplate is returned for a chat request that brings its own template
// (chat_template, or chat_template_kwargs.chat_template). vLLM renders such a template only
// with --trust-request-chat-template and refuses the request otherwise; the router never runs
// a client's template (its cost is the client's choice), so it cannot know the prompt.
var ErrRequestTemplate = errors.New("the request brings its own chat template")

// chatTemplate is a compiled chat template.
type chatTemplate struct {
	tmpl *jinja.Template
	src  string // as loaded, for transformers' continue_final_message field check
	// splice: long printed strings bypass the engine's output buffer (splice.go); splicers
	// holds the per-render state, of *splicer.
	splice   bool
	splicers sync.Pool
}

// tojsonRef matches a tojson filter application inside a template tag.
var tojsonRef = regexp.MustCompile(`\|\s*tojson\b`)

// tagSpan matches one {{ ... }} or {% ... %} tag.
var tagSpan = regexp.MustCompile(`(?s)\{\{.*?\}\}|\{%.*?%\}`)

// outputTag splits an output tag into its delimiters (with whitespace control)
// and its expression.
var outputTag = regexp.MustCompile(`(?s)^(\{\{-?)(.*?)(-?\}\})$`)

// Names our Python-compatible filters are registered under. The engine resolves
// built-in filters before template data, so the template's references are
// rewritten to reach ours.
const (
	pyTojsonName = "condisagg_py_tojson"
	pyOutputName = "condisagg_py_output"
)

// compileChatTemplate compiles src with source rewrites that make the engine
// print what Jinja2 prints: tojson becomes Python's json.dumps, and every
// {{ expr }} goes through a filter that prints None, booleans and floats as
// Python does. The first attempt also prints a concatenation chain that starts
// with a string literal as one output tag per operand (splitConcat), which
// prints the same strings without copying the message text at every +. If a
// rewritten source does not compile (an unusual tag the rewrite misread), the
// rewrite without the split, the tojson rewrite alone, then the original are
// used.
func compileChatTemplate(src string) (*chatTemplate, error) {
	renameTojson := func(tag string) string { return tojsonRef.ReplaceAllString(tag, "| "+pyTojsonName) }
	wrapOutput := func(tag string, split bool) string {
		tag = renameTojson(tag)
		m := outputTag.FindStringSubmatch(tag)
		if m == nil || strings.TrimSpace(m[2]) == "" {
			return tag
		}
		ops, ok := splitConcat(m[2])
		if !split || !ok {
			return m[1] + " (" + m[2] + ") | " + pyOutputName + " " + m[3]
		}
		var sb strings.Builder
		for i, op := range ops {
			open, closing := "{{", "}}"
			if i == 0 {
				open = m[1]
			}
			if i == len(ops)-1 {
				closing = m[3]
			}
			sb.WriteString(open + " (" + op + ") | " + pyOutputName + " " + closing)
		}
		return sb.String()
	}
	splitOutput := func(tag string) string { return wrapOutput(tag, true) }
	wholeOutput := func(tag string) string { return wrapOutput(tag, false) }
	var firstErr error
	for i, rewrite := range []func(string) string{splitOutput, wholeOutput, renameTojson, nil} {
		s := src
		if rewrite != nil {
			s = tagSpan.ReplaceAllStringFunc(src, rewrite)
		}
		tmpl, err := jinja.Compile(s)
		if err == nil {
			// Splicing needs every output tag to end in the output filter (the first two rewrites).
			ct := &chatTemplate{tmpl: tmpl, src: src, splice: i < 2 && spliceable(src)}
			ct.splicers.New = func() any { return newSplicer() }
			return ct, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, fmt.Errorf("tokenizer: compile chat template: %w", firstErr)
}

// pyOutputFilter prints scalars as Jinja2 does (str() of the Python value);
// strings, lists and dicts are left to the engine.
func pyOutputFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	v := args[0]
	switch {
	case v.IsNone():
		return jinja.NewString("None"), nil
	case v.IsFloat():
		return jinja.NewString(pyFloatRepr(v.AsFloat())), nil
	}
	return v, nil
}

// ChatOptions are per-call inputs of chat rendering that do not come from the body.
type ChatOptions struct {
	// Now is the time strftime_now formats; the zero value means time.Now().
	Now time.Time
}

// RenderChat renders the chat template for an OpenAI /v1/chat/completions body
// the way vLLM does: messages normalised as vLLM's chat_utils does for
// string-content templates, tools as vLLM dumps them, add_generation_prompt
// (default true), the tokenizer's special tokens, and chat_template_kwargs
// passed through as template variables. With continue_final_message the
// prompt ends inside the final message, cut as transformers'
// apply_chat_template cuts it (continueFinal). body must not change during the
// call; nothing returned refers to it.
func (t *Tokenizer) RenderChat(body []byte, opts ChatOptions) (string, error) {
	var out string
	err := t.renderChat(body, opts, func(prompt string, _ *chatCall) { out = strings.Clone(prompt) })
	return out, err
}

// renderChat renders the prompt and hands it, with the request's add_special_tokens (vLLM's
// chat default is false) and truncation, to use; the prompt may alias a pooled buffer and is valid only
// during use.
func (t *Tokenizer) renderChat(body []byte, opts ChatOptions, use func(prompt string, call *chatCall)) error {
	if t.chat == nil {
		return fmt.Errorf("tokenizer: render chat: %w", ErrNoChatTemplate)
	}
	vars, call, err := t.chatVars(body, opts)
	if err != nil {
		return err
	}
	var sp *splicer
	if t.chat.splice && !mayHoldMarker(body) {
		sp = t.chat.splicers.Get().(*splicer)
		defer func() { sp.reset(); t.chat.splicers.Put(sp) }()
		vars[pyOutputName] = sp.filter
	}
	if b := t.budget; b != nil && b.cancelled() {
		return fmt.Errorf("tokenizer: render chat template: %w", ErrCancelled)
	}
	out, err := t.chat.tmpl.RenderValues(vars)
	if err != nil {
		return fmt.Errorf("tokenizer: render chat template: %w", err)
	}
	if sp != nil {
		out = sp.expand(out)
	}
	if call.continueFinal {
		if out, err = continueFinal(out, call.final); err != nil {
			return err
		}
	}
	use(out, &call)
	return nil
}

// EncodeChat renders the chat template for a /v1/chat/completions body and
// appends the prompt's ids to dst, encoded with add_special_tokens=False as vLLM
// does (the template already holds BOS where the model wants it).
func (t *Tokenizer) EncodeChat(dst []uint32, body []byte, opts ChatOptions) ([]uint32, error) {
	err := t.renderChat(body, opts, func(prompt string, call *chatCall) {
		dst = t.encodeTruncated(dst, prompt, call.special, call.trunc)
	})
	if err == nil && t.budget != nil {
		err = t.budget.err
	}
	return dst, err
}

// chatCall is what a chat request asks of rendering besides the template
// variables.
type chatCall struct {
	special       SpecialTokens // add_special_tokens
	continueFinal bool          // continue_final_message: cut the prompt after the final message
	final         string        // the final message's content before tagging (continueFinal only; borrows the body)
	trunc         truncation    // truncate_prompt_tokens, truncation_side
}

func (t *Tokenizer) chatVars(body []byte, opts ChatOptions) (map[string]jinja.Value, chatCall, error) {
	req, err := decodeJSONBorrowed(body) // the values end with renderChat: the prompt is a new string
	if err != nil {
		return nil, chatCall{}, fmt.Errorf("tokenizer: parse chat request: %w", err)
	}
	if !req.IsDict() {
		return nil, chatCall{}, fmt.Errorf("tokenizer: parse chat request: body is not a JSON object")
	}
	r := req.AsDict()
	msgs, ok := r.Get("messages")
	if !ok || !msgs.IsList() {
		return nil, chatCall{}, fmt.Errorf("tokenizer: chat request: messages missing or not a list")
	}
	if requestTemplate(r) {
		return nil, chatCall{}, fmt.Errorf("tokenizer: chat request: chat_template: %w", ErrRequestTemplate)
	}
	var call chatCall
	agp, err := optionalBool(r, "add_generation_prompt", true)
	if err != nil {
		return nil, chatCall{}, err
	}
	if call.continueFinal, err = optionalBool(r, "continue_final_message", false); err != nil {
		return nil, chatCall{}, err
	}
	if call.continueFinal && agp {
		// vLLM's request validator refuses the pair when both are sent true;
		// with add_generation_prompt left at its default, transformers'
		// apply_chat_template refuses it. Both are 400s.
		if v, ok := r.Get("add_generation_prompt"); ok && !v.IsNone() {
			return nil, chatCall{}, fmt.Errorf("tokenizer: chat request: Cannot set both `continue_final_message` and `add_generation_prompt` to True")
		}
		return nil, chatCall{}, fmt.Errorf("tokenizer: chat request: continue_final_message needs add_generation_prompt false (it defaults to true)")
	}
	messages, err := vllmMessages(msgs.AsList())
	if err != nil {
		return nil, chatCall{}, err
	}
	if call.continueFinal {
		if call.final, err = t.tagFinalMessage(messages.AsList()); err != nil {
			return nil, chatCall{}, err
		}
	}
	tools := jinja.None()
	if tv, ok := r.Get("tools"); ok && !tv.IsNone() {
		if tools, err = vllmTools(tv); err != nil {
			return nil, chatCall{}, err
		}
	}
	special, err := optionalBool(r, "add_special_tokens", false)
	if err != nil {
		return nil, chatCall{}, err
	}
	call.special = SpecialTokens(special)
	if call.trunc, err = readTruncation(func(k string) (reqjson.Value, bool) {
		v, ok := r.Get(k)
		return rawValue(v), ok
	}); err != nil {
		return nil, chatCall{}, err
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	vars := map[string]jinja.Value{
		"messages":              messages,
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(agp),
		"bos_token":             jinja.NewString(t.cfg.bosToken),
		"eos_token":             jinja.NewString(t.cfg.eosToken),
		pyTojsonName:            jinja.NewCallable("tojson", tojsonFilter),
		pyOutputName:            jinja.NewCallable("output", pyOutputFilter),
		"strftime_now":          jinja.NewCallable("strftime_now", strftimeNow(now)),
	}
	if err := addRequestVars(vars, r); err != nil {
		return nil, chatCall{}, err
	}
	if call.continueFinal {
		// vLLM 0.32 hands apply_chat_template the request's own flags, which
		// win over chat_template_kwargs; add_generation_prompt is false here.
		vars["add_generation_prompt"] = jinja.NewBool(false)
	}
	return vars, call, nil
}

// optionalBool reads a boolean request field as pydantic's lax mode does ("true", 1, "yes"
// and the like are booleans); absent or null gives def.
func optionalBool(r *jinja.Dict, key string, def bool) (bool, error) {
	v, ok := r.Get(key)
	if !ok || v.IsNone() {
		return def, nil
	}
	b, err := rawValue(v).Bool()
	if err != nil {
		return false, fmt.Errorf("tokenizer: chat request: %s %s is not a bool", key, v)
	}
	return b, nil
}

// requestTemplate reports whether the request brings its own chat template (chat_template, or
// chat_template_kwargs.chat_template, the two vLLM's validate_chat_template checks).
func requestTemplate(r *jinja.Dict) bool {
	if v, ok := r.Get("chat_template"); ok && !v.IsNone() {
		return true
	}
	if kw, ok := r.Get("chat_template_kwargs"); ok && kw.IsDict() {
		if v, ok := kw.AsDict().Get("chat_template"); ok && !v.IsNone() {
			return true
		}
	}
	return false
}

// rawValue writes a decoded scalar back as JSON, so request fields read from the template
// values follow the same lax rules as every other reading (reqjson); containers become an
// empty object, which no scalar reading accepts.
func rawValue(v jinja.Value) reqjson.Value {
	switch {
	case v.IsNone() || v.IsUndefined():
		return reqjson.Value("null")
	case v.IsBool():
		return reqjson.Value(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		return reqjson.Value(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		return reqjson.Value(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		b, _ := json.Marshal(v.AsString())
		return reqjson.Value(b)
	}
	return reqjson.Value("{}")
}

// addRequestVars adds the other request fields vLLM hands to the template:
// documents, reasoning_effort, and chat_template_kwargs last, overriding.
func addRequestVars(vars map[string]jinja.Value, r *jinja.Dict) error {
	if v, ok := r.Get("documents"); ok {
		vars["documents"] = v
	}
	if v, ok := r.Get("reasoning_effort"); ok && !v.IsNone() {
		vars["reasoning_effort"] = v
	}
	kw, ok := r.Get("chat_template_kwargs")
	if !ok || kw.IsNone() {
		return nil
	}
	if !kw.IsDict() {
		return fmt.Errorf("tokenizer: chat request: chat_template_kwargs is not an object")
	}
	for _, k := range kw.AsDict().Keys {
		if k == pyTojsonName || k == pyOutputName || k == "continue_final_message" {
			// continue_final_message is an apply_chat_template parameter, never
			// a template variable, and vLLM 0.32 takes it from the request field.
			continue
		}
		vars[k], _ = kw.AsDict().Get(k)
	}
	return nil
}

// vllmMessages rebuilds each message as vLLM hands it to a string-content chat
// template: {role, content} with text parts joined by "\n", then tool_calls
// (assistant, arguments parsed from JSON) and reasoning/reasoning_content
// (assistant), tool_call_id (tool), name, task, and tools (developer).
func vllmMessages(msgs *jinja.List) (jinja.Value, error) {
	out := make([]jinja.Value, 0, msgs.Len())
	for i, m := range msgs.Items {
		if !m.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: messages[%d] is not an object", i)
		}
		md := m.AsDict()
		role, ok := md.Get("role")
		if !ok || !role.IsString() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: messages[%d].role missing or not a string", i)
		}
		content, err := messageText(md, i)
		if err != nil {
			return jinja.Undefined(), err
		}
		nm := jinja.NewDict()
		d := nm.AsDict()
		d.Set("role", role)
		d.Set("content", jinja.NewString(content))
		switch role.AsString() {
		case "assistant":
			if tc, ok := md.Get("tool_calls"); ok && !tc.IsNone() {
				calls, err := toolCalls(tc, i)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.Set("tool_calls", calls)
			}
			// vLLM accepts the deprecated reasoning_content as reasoning and hands
			// templates both names.
			r, ok := md.Get("reasoning")
			if !ok || r.IsNone() {
				r, ok = md.Get("reasoning_content")
			}
			if ok && !r.IsNone() {
				d.Set("reasoning", r)
				d.Set("reasoning_content", r)
			}
		case "tool":
			if id, ok := md.Get("tool_call_id"); ok {
				d.Set("tool_call_id", id)
			}
		}
		for _, k := range []string{"name", "task"} {
			if v, ok := md.Get(k); ok && v.IsString() {
				d.Set(k, v)
			}
		}
		if role.AsString() == "developer" {
			d.Set("tools", getOrNone(md, "tools"))
		}
		out = append(out, nm)
	}
	return jinja.NewList(out), nil
}

// messageText flattens a message's content: a string, null, or a list of parts
// whose text parts are joined with "\n". Other part types are refused.
func messageText(md *jinja.Dict, i int) (string, error) {
	c, ok := md.Get("content")
	if !ok || c.IsNone() {
		return "", nil
	}
	if c.IsString() {
		return c.AsString(), nil
	}
	if !c.IsList() {
		return "", fmt.Errorf("tokenizer: chat request: messages[%d].content is neither a string nor a list", i)
	}
	var parts []string
	for j, p := range c.AsList().Items {
		if p.IsString() {
			parts = append(parts, p.AsString())
			continue
		}
		if !p.IsDict() {
			return "", fmt.Errorf("tokenizer: chat request: messages[%d].content[%d] is not an object", i, j)
		}
		typ, _ := p.AsDict().Get("type")
		if !typ.IsString() || typ.AsString() != "text" {
			return "", fmt.Errorf("tokenizer: chat request: messages[%d].content[%d] type %s: %w", i, j, typ, ErrUnsupported)
		}
		text, _ := p.AsDict().Get("text")
		if !text.IsString() {
			return "", fmt.Errorf("tokenizer: chat request: messages[%d].content[%d].text is not a string", i, j)
		}
		parts = append(parts, text.AsString())
	}
	return strings.Join(parts, "\n"), nil
}

// toolCalls copies an assistant's tool_calls, replacing each function.arguments
// JSON string by the object it encodes ({} when empty), as vLLM does.
func toolCalls(tc jinja.Value, i int) (jinja.Value, error) {
	if !tc.IsList() {
		return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: messages[%d].tool_calls is not a list", i)
	}
	out := make([]jinja.Value, 0, tc.AsList().Len())
	for j, call := range tc.AsList().Items {
		if !call.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: messages[%d].tool_calls[%d] is not an object", i, j)
		}
		nc := copyDict(call.AsDict())
		fn, ok := nc.AsDict().Get("function")
		if ok && fn.IsDict() {
			nf := copyDict(fn.AsDict())
			args, _ := nf.AsDict().Get("arguments")
			switch {
			case args.IsString() && args.AsString() != "":
				parsed, err := decodeJSONValue([]byte(args.AsString()))
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: messages[%d].tool_calls[%d].function.arguments: %w", i, j, err)
				}
				nf.AsDict().Set("arguments", parsed)
			case args.IsDict():
			default:
				if args.IsUndefined() || args.IsNone() || args.IsString() || !args.IsTruthy() {
					nf.AsDict().Set("arguments", jinja.NewDict())
				}
			}
			nc.AsDict().Set("function", nf)
		}
		out = append(out, nc)
	}
	return jinja.NewList(out), nil
}

func copyDict(d *jinja.Dict) jinja.Value {
	n := jinja.NewDict()
	for _, k := range d.Keys {
		n.AsDict().Set(k, d.Data[k])
	}
	return n
}

// vllmTools rebuilds tools as vLLM's ChatCompletionToolsParam.model_dump() does:
// {"type", "function": {"name", "description", "parameters"}} with nulls kept,
// then any extra keys in request order (vLLM's models allow extra fields).
func vllmTools(tv jinja.Value) (jinja.Value, error) {
	if !tv.IsList() {
		return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: tools is not a list")
	}
	out := make([]jinja.Value, 0, tv.AsList().Len())
	for i, tool := range tv.AsList().Items {
		if !tool.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: tools[%d] is not an object", i)
		}
		fn, ok := tool.AsDict().Get("function")
		if !ok || !fn.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: tools[%d].function missing", i)
		}
		name, ok := fn.AsDict().Get("name")
		if !ok || !name.IsString() {
			return jinja.Undefined(), fmt.Errorf("tokenizer: chat request: tools[%d].function.name missing", i)
		}
		nf := jinja.NewDict()
		nf.AsDict().Set("name", name)
		nf.AsDict().Set("description", getOrNone(fn.AsDict(), "description"))
		nf.AsDict().Set("parameters", getOrNone(fn.AsDict(), "parameters"))
		copyExtras(nf.AsDict(), fn.AsDict())
		nt := jinja.NewDict()
		typ, ok := tool.AsDict().Get("type")
		if !ok || typ.IsNone() {
			typ = jinja.NewString("function")
		}
		nt.AsDict().Set("type", typ)
		nt.AsDict().Set("function", nf)
		copyExtras(nt.AsDict(), tool.AsDict())
		out = append(out, nt)
	}
	return jinja.NewList(out), nil
}

// copyExtras appends to dst, in src order, the keys of src that dst lacks.
func copyExtras(dst, src *jinja.Dict) {
	for _, k := range src.Keys {
		if !dst.Has(k) {
			dst.Set(k, src.Data[k])
		}
	}
}

func getOrNone(d *jinja.Dict, k string) jinja.Value {
	if v, ok := d.Get(k); ok {
		return v
	}
	return jinja.None()
}

// continueFinalTag is the marker transformers' render_jinja_template appends to
// the final message's content for continue_final_message; the prompt is cut
// where the template printed it.
const continueFinalTag = "CONTINUE_FINAL_MESSAGE_TAG "

// tagFinalMessage appends continueFinalTag to the final message's content, as
// transformers (5.19 in vLLM 0.32's image, 5.24 for the fixtures) does before
// rendering with continue_final_message, and returns the content untagged.
// Our messages always carry string content (text parts already joined).
func (t *Tokenizer) tagFinalMessage(msgs *jinja.List) (string, error) {
	if msgs.Len() == 0 {
		return "", fmt.Errorf("tokenizer: chat request: continue_final_message is set but the conversation is empty")
	}
	if !strings.Contains(t.chat.src, "content") {
		return "", fmt.Errorf("tokenizer: chat request: continue_final_message is set but the chat template never mentions the \"content\" field")
	}
	last := msgs.Items[msgs.Len()-1].AsDict()
	c, _ := last.Get("content")
	final := c.AsString()
	last.Set("content", jinja.NewString(final+continueFinalTag))
	return final, nil
}

// continueFinal cuts a prompt rendered with a tagged final message so that it
// ends where that message's content ends: at the last tag, and when the
// template trimmed the tag's trailing space, before the whitespace preceding
// it (Python's rstrip). As transformers, it fails when the template did not
// print the final message or the tag.
func continueFinal(rendered, final string) (string, error) {
	tag := strings.TrimRight(continueFinalTag, " ")
	if !strings.Contains(rendered, pyStrip(final)) || !strings.Contains(rendered, tag) {
		return "", fmt.Errorf("tokenizer: chat request: continue_final_message is set but the final message does not appear in the chat after applying the chat template (final message %s)", clipQuote(pyStrip(final), 80))
	}
	loc := strings.LastIndex(rendered, tag)
	if strings.HasPrefix(rendered[loc:], continueFinalTag) {
		return rendered[:loc], nil
	}
	return strings.TrimRightFunc(rendered[:loc], pyIsSpace), nil
}

// pyIsSpace is Python's str.isspace for one character: Unicode White_Space
// plus the ASCII separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyStrip is Python's str.strip() with no argument.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// clipQuote quotes s, cut to about n bytes (on a rune boundary) with "..." when longer.
func clipQuote(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "..."
}
