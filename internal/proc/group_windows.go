package proc

import (
	"errors"
	"syscall"
)

// signalGroup is never reached: Validate refuses Config.Group on Windows, which has no
// process groups to signal.
func signalGroup(int, syscall.Signal) error {
	return errors.New("process groups are not supported on windows")
}
