// Package tokenizer turns OpenAI request bodies into the token ids vLLM computes.
//
// (Draft: completed with the chat and cache work.)
package tokenizer
