package tune

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: what is written to the terminal side can be read from
// the controller side.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(controller.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		controller.Close()
		t.Skipf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		controller.Close()
		t.Skipf("pty number: %v", err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		controller.Close()
		t.Skipf("open pty terminal side: %v", err)
	}
	return controller, terminal
}

// TestBarDrawsOnTerminal: the same calls that draw nothing into a file draw the bar on a
// terminal, and a successful run ends its line at 100%.
func TestBarDrawsOnTerminal(t *testing.T) {
	controller, terminal := openPTY(t)
	defer controller.Close()
	if !isTerminal(terminal) {
		t.Fatal("isTerminal(pty) = false")
	}
	read := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := controller.Read(buf)
			b.Write(buf[:n])
			if err != nil { // EIO once the terminal side is closed and everything was read
				read <- b.Bytes()
				return
			}
		}
	}()
	b := NewBar(terminal, true)
	b.Plan(1000)
	b.Advance("isl_bounding T=512 R=0.7", 400)
	b.Advance("isl_bounding T=512 R=0.7", 500)
	b.End(nil)
	terminal.Close()
	out := string(<-read)
	for _, want := range []string{"isl_bounding T=512 R=0.7", "100%", "(1000/1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q: %q", want, out)
		}
	}
	if !strings.HasSuffix(strings.TrimRight(out, " "), "\n") {
		t.Errorf("line not ended: %q", out)
	}
	if NewBar(terminal, false).on {
		t.Error("a bar not asked to show draws on a terminal")
	}
}
