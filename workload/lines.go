package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// lineReader reads newline-terminated lines of at most maxBytes bytes, counting them.
type lineReader struct {
	br       *bufio.Reader
	maxBytes int
	line     int // number of the last line returned, 1-based
}

func newLineReader(r io.Reader, maxBytes int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, maxBytes), maxBytes: maxBytes}
}

// next returns the next line with its newline, valid until the next call, or io.EOF. Other
// errors read "line N: ..." so callers can prefix them with the format name.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.br.ReadSlice('\n')
	switch {
	case err == nil:
		l.line++
		return line, nil
	case errors.Is(err, bufio.ErrBufferFull):
		l.line++
		return nil, fmt.Errorf("line %d: longer than %d bytes", l.line, l.maxBytes)
	case errors.Is(err, io.EOF) && len(line) > 0:
		l.line++
		return line, nil
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	default:
		return nil, fmt.Errorf("read after line %d: %w", l.line, err)
	}
}
