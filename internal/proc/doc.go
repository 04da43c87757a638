// Package proc supervises one external process: it starts a command (with extra environment
// variables if asked), keeps a bounded tail of what the process prints (and copies it to an
// optional writer), parses its slog lines so a caller can wait for one, pauses and resumes it,
// and stops it with SIGTERM, then SIGKILL after a grace period.
//
// Invariants: a started process is reaped by exactly one goroutine, which Start starts and
// which ends when the process exits; Stop and Kill make it exit and wait for that goroutine,
// so a caller that always calls Stop leaks neither goroutines nor processes. On Linux the
// kernel also kills the child when the thread that started it dies (Pdeathsig), so a test
// binary that panics on its timeout leaves nothing behind; elsewhere Stop must be called.
// Every child gets its own process group, so a terminal's Ctrl-C reaches only the owner, which
// then stops its children in its own order. With Config.Group the signals go to that whole
// group, and the process's exit ends the group: Stop and Kill then leave nothing it forked
// behind. The output tail and the parsed lines are bounded; the oldest go first.
//
// Every method of Proc is safe for concurrent use. The output state is guarded by one lock
// (output.mu); the exit status is written once, before the Exited channel is closed.
//
// proc imports only the standard library and no other condisagg package, so that both envoy
// and e2e can use it.
package proc
