package wire

import "fmt"

// The protocol's version (docs/protocol.md §1, "Versions"). The major
// version names the wire format and the rules: peers of different majors do
// not talk (the QUIC ALPN carries it). Minor versions of one major only add
// what an older peer may ignore.
const (
	ProtocolMajor = 1
	ProtocolMinor = 0
)

// ProtocolVersion is "MAJOR.MINOR".
func ProtocolVersion() string { return fmt.Sprintf("%d.%d", ProtocolMajor, ProtocolMinor) }
