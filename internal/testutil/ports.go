// Package testutil holds helpers shared by bq's tests and benchmarks (never
// by production code).
package testutil

import (
	"fmt"
	"net"
)

// FreeUDPPortBase finds n consecutive UDP ports on loopback that are free
// right now (QUIC listens on UDP). Another process may take one before the
// caller binds it; that is unlikely, and a test then fails loudly.
func FreeUDPPortBase(n int) (int, error) {
	for range 50 {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		base := c.LocalAddr().(*net.UDPAddr).Port
		_ = c.Close()
		if base+n > 65000 {
			continue
		}
		ok := true
		for i := 0; i < n && ok; i++ {
			c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				continue
			}
			_ = c.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("testutil: no %d consecutive free UDP ports on loopback", n)
}
