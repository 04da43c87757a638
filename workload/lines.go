package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// lineBufferBytes is the read buffer; longer lines (up to maxBytes) are assembled in long.
const lineBufferBytes = 64 << 10

// lineReader reads newline-terminated lines of at most maxBytes bytes, counting them.
type lineReader struct {
	br       *bufio.Reader
	maxBytes int
	line     int    // number of the last line returned, 1-based
	long     []byte // assembly buffer for lines longer than the read buffer
}

func newLineReader(r io.Reader, maxBytes int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, min(maxBytes, lineBufferBytes)), maxBytes: maxBytes}
}

// next returns the next line with its newline, valid until the next call, or io.EOF. Other
// errors read "line N: ..." so callers can prefix them with the format name.
func (l *lineReader) next() ([]byte, error) {
	l.long = l.long[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(l.long)+len(frag) > l.maxBytes {
			l.line++
			return nil, fmt.Errorf("line %d: longer than %d bytes", l.line, l.maxBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			l.long = append(l.long, frag...)
			continue
		}
		if len(l.long) > 0 {
			l.long = append(l.long, frag...)
			frag = l.long
		}
		switch {
		case err == nil, errors.Is(err, io.EOF) && len(frag) > 0:
			l.line++
			return frag, nil
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		default:
			return nil, fmt.Errorf("read after line %d: %w", l.line, err)
		}
	}
}
