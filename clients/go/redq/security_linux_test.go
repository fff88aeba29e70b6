// On Linux the servers the tests start get SIGTERM (redq stops gracefully,
// with the redis-server of `redq dev`) should the test binary die without
// stopping them, as on a -timeout panic.

package redq

import (
	"os/exec"
	"syscall"
)

func init() {
	dieWithTests = func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	}
}
