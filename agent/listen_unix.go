//go:build unix

package agent

import (
	"net"
	"syscall"
)

// listenPrivate listens on a Unix socket that only its owner may open.
// The umask is the process's: nothing else of the agent creates files
// meanwhile.
func listenPrivate(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
