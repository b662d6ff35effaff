package server

import (
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
	"golang.org/x/time/rate"
)

// preverifyFor is the transport's Preverify: the check each connection's
// read loop runs ahead of the core (wire.Preverifier, with the keyring of
// the epoch served). A server's connection is checked in full. A client's
// is checked at most at client_rate (burst client_burst), the rate at which
// the core takes that client's requests: beyond it the core refuses them
// before any signature is checked, so checking them ahead would let a
// flooding client spend the server's other cores on work the core never
// does. Over the rate a message goes through unchecked, to be refused.
func (s *Server) preverifyFor(from transport.Peer) func(*wire.Message) {
	check := func(m *wire.Message) { s.preverifier.Load().Check(m) }
	if !from.IsClient {
		return check
	}
	lim := rate.NewLimiter(rate.Limit(s.clientRate), s.clientBurst)
	return func(m *wire.Message) {
		if lim.Allow() {
			check(m)
		}
	}
}

// clientRateOf is client_rate and client_burst as settings put them in the core.
func clientRateOf(set *Settings) (float64, int) {
	c := core.DefaultConfig(0, 1, 0, wire.Keyring{}, nil)
	set.ApplyCore(&c)
	return c.ClientRate, c.ClientBurst
}
