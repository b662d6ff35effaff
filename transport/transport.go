// Package transport moves wire messages between bq's servers and clients.
//
// A Transport gives reliable FIFO delivery per (sender, receiver) pair while
// a connection lasts — the paper's FIFO channels — and reports connections
// coming and going, so clients can resend their latest statements after a
// reconnect (docs/protocol.md §6). Every message is encoded to bytes and decoded
// strictly on receipt, in both implementations: QUIC (real) and an in-memory
// network (tests). One contract suite (contract_test.go) runs against both.
//
// What a caller can rely on, in both implementations:
//   - Messages from one peer arrive in the order it sent them, while its
//     connection lasts. A connection that drops may lose what was in flight;
//     EventConnected then says a new one is up (resend what matters).
//   - A client's messages come after the EventConnected about it and before
//     the EventDisconnected; a client is named by the ClientID its connection
//     was bound to (a signed Hello over QUIC), never by what it claims.
//   - A server's EventConnected/EventDisconnected about server j follow the
//     link this server sends to j on; j's messages come on j's own link, so
//     they may arrive before this server's EventConnected about j.
//   - Nothing blocks on a peer: Send queues (bounded, see Limits) and fails at
//     once when it cannot; a client that does not keep up is disconnected.
//   - Bad bytes from a peer give EventBadInput (Err is a *BadInputError) and
//     drop that peer's connection, never the transport.
//
// The caller must drain Inbound: while it does not, the transport stops
// reading from peers (and their queues fill), but Close still returns.
package transport

import (
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/bq-lock/bq/wire"
)

// Peer names the other end of a channel (see wire.Peer).
type Peer = wire.Peer

// ServerPeer names server id.
func ServerPeer(id wire.ServerID) Peer { return wire.ServerPeer(id) }

// ClientPeer names client c.
func ClientPeer(c wire.ClientID) Peer { return wire.ClientPeer(c) }

// norm clears the field a Peer of its kind does not use, so that equal
// peers compare equal.
func norm(p Peer) Peer {
	if p.IsClient {
		p.Server = 0
	} else {
		p.Client = wire.ClientID{}
	}
	return p
}

// EventKind says what an Inbound reports.
type EventKind uint8

// The kinds of Inbound.
const (
	// EventMessage: Msg holds a decoded, shape-validated message from From.
	EventMessage EventKind = iota
	// EventConnected: a channel to From is (again) up. Anything sent before may have been lost.
	EventConnected
	// EventDisconnected: the channel to From went down.
	EventDisconnected
	// EventBadInput: From sent bytes that did not decode (Err says why); its connection was closed.
	EventBadInput
	// EventRefused (clients): server From refused our connection for a
	// reason retrying cannot mend (Err says which: no protocol version in
	// common, another cluster, our Hello refused). The transport keeps
	// trying, in case the server changes; the caller decides whether to wait.
	EventRefused
)

func (k EventKind) String() string {
	switch k {
	case EventMessage:
		return "message"
	case EventConnected:
		return "connected"
	case EventDisconnected:
		return "disconnected"
	case EventBadInput:
		return "bad-input"
	case EventRefused:
		return "refused"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Inbound is one thing a Transport delivers, in order per peer.
type Inbound struct {
	Kind EventKind
	From Peer
	Msg  *wire.Message // EventMessage only
	Err  error         // EventBadInput only
	Size int           // encoded size of Msg
	// Admission is what a closed cluster's client certificate grants
	// (EventConnected of a client, when AdmitClient returned one).
	Admission *wire.AdmissionBody
	// Observes is set on EventConnected of an observer connection
	// (docs/protocol.md change 32): the client it observes as, whose key
	// proved itself; From is the connection's own ObserverID.
	Observes *wire.ClientID
	// Version is the protocol version a server announced in its Challenge
	// (EventConnected at a client over QUIC; zero where unknown).
	Version wire.Version
}

func (in Inbound) String() string {
	switch in.Kind {
	case EventMessage:
		return fmt.Sprintf("%s -> %s", in.From, in.Msg)
	case EventBadInput:
		return fmt.Sprintf("%s bad-input: %v", in.From, in.Err)
	}
	return fmt.Sprintf("%s %s", in.From, in.Kind)
}

// Transport is one node's end of the network.
type Transport interface {
	// Send encodes msg and queues it for to, FIFO per peer. It never blocks
	// on the network; it fails at once with ErrUnknownPeer (not a server
	// this node talks to now, this node itself, or a client when sent by a client),
	// ErrNotConnected (a client that has no live connection here),
	// ErrQueueFull or ErrClosed, or with an encoding error for a message
	// that is invalid or over Limits.MaxFrame. To a server whose link is down
	// it queues: the message goes out when the link is back, if the queue
	// has not overflowed. ErrQueueFull to a client also disconnects it.
	Send(to Peer, msg *wire.Message) error
	// Inbound delivers messages and connection events. It is closed after Close.
	Inbound() <-chan Inbound
	// Close stops the transport and waits for its goroutines to exit.
	Close() error
}

// Retrustable is a Transport whose trusted certificate authorities can
// change while it runs: a cluster CA rotation (docs/protocol.md change 43)
// adds the next CA, which issues the certificates of members added after it.
type Retrustable interface {
	SetCAPool(pool *x509.CertPool)
}

// Reconfigurable is a Transport whose set of servers can change while it
// runs (docs/protocol.md change 43: a cluster moves to a new epoch with other
// member servers). Both implementations are: the QUIC node (ListenServer,
// DialClient) and a MemNetwork endpoint.
type Reconfigurable interface {
	// SetServers makes addrs the servers this node talks to, by id. A server
	// new to the set is dialed. One no longer in it is let go: its connection
	// is closed ("no longer a member"; EventDisconnected if it was up), what
	// was queued for it is dropped, Send to it is ErrUnknownPeer, and a
	// server closes and refuses its connections from then on. One whose
	// address changed is let go and dialed anew at the new address (the
	// EventDisconnected about it comes before the next EventConnected). One
	// unchanged keeps its connection and queue. A server's own id, and an id
	// with an empty address, are left out. After Close it does nothing.
	SetServers(addrs map[wire.ServerID]string)
}

// Errors of Send.
var (
	ErrClosed       = errors.New("transport: closed")
	ErrUnknownPeer  = errors.New("transport: unknown peer")
	ErrNotConnected = errors.New("transport: peer not connected")
	ErrQueueFull    = errors.New("transport: send queue full")
)
