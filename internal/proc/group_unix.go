//go:build unix

package proc

import (
	"os"
	"syscall"
)

// signalGroup sends sig to every process in the group whose id is pgid; an empty group reads
// as os.ErrProcessDone, as os.Process.Signal reports a process that is gone.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil {
		if err == syscall.ESRCH {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}
