// Package tokenizer turns OpenAI request bodies into the token ids vLLM computes.
//
// It loads a Hugging Face model directory (Load: tokenizer.json,
// tokenizer_config.json, chat_template.jinja) and reproduces, token for token,
// what vLLM gets from the tokenizers and transformers Python packages:
//
//   - EncodeCompletion: a /v1/completions body, read as vLLM's server reads it
//     (internal/reqjson: exact keys, the last of repeated keys, pydantic's lax
//     mode). A string prompt is encoded with add_special_tokens (default true:
//     Llama-3 gets its BOS from the TemplateProcessing post-processor); a
//     token-id prompt is used as is; a list of several prompts is refused with
//     ErrBatchPrompt; truncate_prompt_tokens keeps the tokens vLLM keeps.
//   - EncodeChat (and RenderChat): a /v1/chat/completions body. Messages and
//     tools are normalised as vLLM's chat_utils does, the chat template is
//     rendered with github.com/ardanlabs/jinja (continue_final_message cuts the
//     prompt inside the final message as transformers does), and the prompt is
//     encoded with add_special_tokens=false unless the body says otherwise. A
//     request that brings its own chat template gets ErrRequestTemplate.
//   - Encode: plain text, with or without the post-processor's special tokens.
//
// LoadModel also accepts "hf:<org>/<model>[@rev]": the files are downloaded once
// into the huggingface_hub cache layout (HF_TOKEN, HF_HOME/HF_HUB_CACHE,
// HF_HUB_OFFLINE, HF_ENDPOINT via HubOptionsFromEnv) and read from there after.
// NewMetrics exports the segment-cache counters on an injected registry.
//
// Supported tokenizer.json features: BPE models (vocab, merges in both
// encodings, ignore_merges, byte_fallback, unk_token, fuse_unk); added tokens
// with lstrip, rstrip, single_word and normalized, matched leftmost-longest;
// normalizers NFC, NFD, NFKC, NFKD, Prepend, Replace (literal) and Sequence;
// pre-tokenizers Split (regex or literal, behavior Isolated), ByteLevel
// (add_prefix_space, use_regex), Metaspace (prepend_scheme always, first or
// never; split) and Sequence; post-processors ByteLevel,
// TemplateProcessing (single template) and Sequence. That covers byte-level BPE
// (Llama-3.x, Qwen2/2.5/3, DeepSeek, GPT-2 style) and SentencePiece-style BPE
// files (Metaspace, or Prepend/Replace normalizers, with byte fallback: Llama-2,
// Mistral). Everything else is refused by Load/New with an error
// wrapping ErrUnsupported that names the feature: other model types (WordPiece,
// Unigram, WordLevel), BPE dropout, continuing_subword_prefix,
// end_of_word_suffix, other normalizers (Lowercase, Strip, regex Replace...),
// other pre-tokenizers (Whitespace, Digits, Punctuation...), Split behaviors other
// than Isolated or invert, RobertaProcessing/BertProcessing, truncation, padding,
// and unknown top-level keys.
//
// The Split regexes of Qwen2/3, Llama-3 and GPT-2 run on a hand-written scanner
// proven equal to regexp2 (corpus test and fuzz target); other patterns run on
// github.com/dlclark/regexp2. Both use Unicode classes measured on Hugging
// Face's regex engine (unicodeclass_table.go), which knows newer Unicode than
// Go's tables.
//
// Chat rendering differs from a plain jinja render in three places, each with a
// test: tojson is Python's json.dumps (ensure_ascii=False, key order kept,
// Python float repr), strftime_now formats ChatOptions.Now, and request JSON
// keeps its key order and integer/float distinction.
//
// Concurrency: a Tokenizer is immutable after load and safe for concurrent use.
// Its two caches have their own locks: the word cache inside the BPE model
// (bounded, like Hugging Face's), and the optional segment cache
// (Options.CacheSegments), which maps the text between two added tokens to its
// ids so that turn N+1 of a conversation only encodes its new text. Cached and
// uncached results are identical because Hugging Face tokenizes each such
// segment independently.
//
// Chat rendering keeps long printed strings out of the template engine's output
// buffer (splice.go): EncodeChat encodes from a pooled buffer, and nothing the
// caches keep may point into it (both caches copy their keys).
//
// Encoding does no I/O; only Load touches the file system, and chat rendering
// reads the clock only when ChatOptions.Now is zero.
// The package imports no other condisagg package.
package tokenizer
