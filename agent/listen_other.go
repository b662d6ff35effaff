//go:build !unix

package agent

import "net"

// listenPrivate listens on a Unix socket; the file mode is set after.
func listenPrivate(path string) (net.Listener, error) { return net.Listen("unix", path) }
