package wire

import "fmt"

// Observation (bqclient status). Unsigned: one server's account, on the
// authenticated channel; a reader compares several servers' accounts.

// Status asks a server for its view of one lock (Lock set) or of all locks.
type Status struct {
	Req  uint64 `cbor:"1,keyasint"`
	Lock string `cbor:"2,keyasint,omitempty"`
	// Epoch is the epoch the asker is in (protocol 1.8, omitted in epoch
	// 0): a server that knows later ones shows them, as for a SessionOpen,
	// so that an observer, which opens no session, follows changes too.
	// A Status with Req 0 is such a probe only: it has no StatusReply.
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
}

func (s *Status) String() string { return fmt.Sprintf("Status(req=%d %q)", s.Req, s.Lock) }

// LockSummary is one lock in a StatusReply.
type LockSummary struct {
	Name    string `cbor:"1,keyasint"`
	Members uint32 `cbor:"2,keyasint"`
}

// StatusReply is one server's account: the lock's members with their highest
// statements (Lock set), or a summary of every lock, plus the clients this
// server suspects and the clients it banned.
type StatusReply struct {
	Req      uint64            `cbor:"1,keyasint"`
	Server   ServerID          `cbor:"2,keyasint"`
	Lock     string            `cbor:"3,keyasint,omitempty"`
	Members  []SignedStatement `cbor:"4,keyasint,omitempty"`
	Locks    []LockSummary     `cbor:"5,keyasint,omitempty"`
	Suspects []ClientID        `cbor:"6,keyasint,omitempty"`
	Banned   []ClientID        `cbor:"7,keyasint,omitempty"`
	// More is set when Locks was cut at the reply size limit.
	More bool `cbor:"8,keyasint,omitempty"`
	// Proclamations are the kept proclamations of Lock's members (§11).
	Proclamations []SignedProclamation `cbor:"9,keyasint,omitempty"`
	// Names are the admission certificates' names of Lock's members that
	// are connected there with one (change 32; at most MaxStatusNames).
	Names []ClientName `cbor:"10,keyasint,omitempty"`
	// Serves is the epoch the server serves and Knows the newest it knows
	// (change 43; protocol 1.5): it sealed Serves if Knows is later.
	Serves uint64 `cbor:"11,keyasint,omitempty"`
	Knows  uint64 `cbor:"12,keyasint,omitempty"`
}

// ClientName is an enrolled client's name, as its certificate gives it.
type ClientName struct {
	Client ClientID `cbor:"1,keyasint"`
	Name   string   `cbor:"2,keyasint"`
}

// MaxStatusNames bounds the names of one Status reply.
const MaxStatusNames = 64

func (s *StatusReply) String() string {
	return fmt.Sprintf("StatusReply(req=%d by=%s %q members=%d locks=%d suspects=%d banned=%d)",
		s.Req, s.Server, s.Lock, len(s.Members), len(s.Locks), len(s.Suspects), len(s.Banned))
}

// ---------------------------------------------------------------------------
