package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// maxSSELineBytes bounds one SSE line; longer lines fail the request.
const maxSSELineBytes = 1 << 20

// streamChunk is the part of an OpenAI completion (or chat) stream chunk loadgen reads.
type streamChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// streamStats is what one response stream told us.
type streamStats struct {
	chunks      int           // chunks carrying output text
	first, last time.Duration // arrival of the first and last of them, since send
	gaps        []time.Duration
	usageTokens int  // usage.completion_tokens, 0 if absent
	cached      int  // usage.prompt_tokens_details.cached_tokens, -1 if absent
	done        bool // saw data: [DONE]
}

// tokens is the output token count: usage when reported, else the content chunks.
func (s *streamStats) tokens() int {
	if s.usageTokens > 0 {
		return s.usageTokens
	}
	return s.chunks
}

// readStream reads an SSE body until [DONE] or EOF, timing content chunks with since (the
// elapsed time since the request was sent). Gaps are kept up to maxGaps.
func readStream(body io.Reader, since func() time.Duration, maxGaps int) (streamStats, error) {
	st := streamStats{cached: -1}
	br := bufio.NewReaderSize(body, 64<<10)
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxSSELineBytes {
			return st, fmt.Errorf("sse: line longer than %d bytes after %d chunks", maxSSELineBytes, st.chunks)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			line = append(line, frag...)
			continue
		}
		if len(line) > 0 {
			frag = append(line, frag...)
			line = line[:0]
		}
		if perr := st.line(bytes.TrimRight(frag, "\r\n"), since(), maxGaps); perr != nil {
			return st, perr
		}
		if st.done {
			return st, nil
		}
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("sse: read after %d chunks: %w", st.chunks, err)
		}
	}
}

// line handles one SSE line received at t.
func (st *streamStats) line(l []byte, t time.Duration, maxGaps int) error {
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return nil // comments, event:, id:, blank separators
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		st.done = true
		return nil
	}
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("sse: chunk %d: %w", st.chunks+1, err)
	}
	if u := c.Usage; u != nil {
		if u.CompletionTokens > 0 {
			st.usageTokens = u.CompletionTokens
		}
		if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens >= 0 {
			st.cached = u.PromptTokensDetails.CachedTokens
		}
	}
	for _, ch := range c.Choices {
		if ch.Text == "" && ch.Delta.Content == "" {
			continue
		}
		if st.chunks == 0 {
			st.first = t
		} else if len(st.gaps) < maxGaps {
			st.gaps = append(st.gaps, t-st.last)
		}
		st.chunks++
		st.last = t
		break
	}
	return nil
}
