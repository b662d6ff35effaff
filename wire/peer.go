package wire

// Peer names the other end of a channel: a server (by id) or a client (by
// the ClientID its connection is bound to, docs/protocol.md §1).
type Peer struct {
	IsClient bool
	Server   ServerID
	Client   ClientID
}

// ServerPeer names server id.
func ServerPeer(id ServerID) Peer { return Peer{Server: id} }

// ClientPeer names client c.
func ClientPeer(c ClientID) Peer { return Peer{IsClient: true, Client: c} }

func (p Peer) String() string {
	if p.IsClient {
		return p.Client.String()
	}
	return p.Server.String()
}
