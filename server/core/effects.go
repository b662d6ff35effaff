package core

import (
	"github.com/bq-lock/bq/wire"
)

// Record is one durable write the core asks for.
type Record struct {
	Bucket string
	Key    []byte
	Value  []byte // nil with Delete
	Delete bool
	// Lazy: the record need not be durable before the messages of its
	// batch, and may wait for the next commit (or the next Tick): a crash
	// that loses it costs nothing (a Held, docs/protocol.md change 13).
	Lazy bool
}

// Eager reports whether recs hold a record that is not Lazy.
func Eager(recs []Record) bool {
	for _, r := range recs {
		if !r.Lazy && !lazyEveryRecord() {
			return true
		}
	}
	return false
}

// Outgoing is one message the core asks to send.
type Outgoing struct {
	To  wire.Peer
	Msg *wire.Message
}

func (o Outgoing) String() string { return o.To.String() + " <- " + o.Msg.String() }

// Reports says whether o only reports objects that their authors signed (a
// listener's Update, a Forward or an Announce of client statements, a reset
// certificate, evidence) and acknowledges nothing. Such a message may leave
// before the records of its batch are durable (docs/protocol.md change 12):
// a crash that loses those records cannot make it false, because what it
// shows was signed by a client or by q servers, not vouched for by this one.
// Acks, Views, MembersReplies, votes, session acks and errors must wait.
func (o Outgoing) Reports() bool {
	m := o.Msg
	if ackBeforeDurable() {
		return true
	}
	return m.Update != nil || m.Forward != nil || m.Announce != nil || m.Reset != nil || m.Evidence != nil
}

// Effects is what the core asks the runtime to do after a step. The runtime
// makes every Record durable before it sends any message of the same batch
// (a reply must never acknowledge what a crash could lose, docs/protocol.md §9),
// except messages that only report (Outgoing.Reports), which may go at once
// as long as no earlier message to the same peer is still waiting.
type Effects struct {
	Persist []Record
	Send    []Outgoing
	// Revoked: clients revoked in this step (change 23); the runtime stops
	// admitting them and closes their connections, once Persist is durable.
	Revoked []wire.ClientID
	// Expired: connected clients whose admission certificate's window
	// ended (change 23); the runtime closes their connections. Each is
	// named once per connection.
	Expired []wire.ClientID
}

// Append adds o's effects after e's.
func (e *Effects) Append(o Effects) {
	e.Persist = append(e.Persist, o.Persist...)
	e.Send = append(e.Send, o.Send...)
	e.Revoked = append(e.Revoked, o.Revoked...)
	e.Expired = append(e.Expired, o.Expired...)
}

// Reader reads what earlier runs persisted, one bucket at a time.
type Reader interface {
	ForEach(bucket string, fn func(k, v []byte) error) error
}

// Input is one thing the transport delivered.
type Input struct {
	Kind InputKind
	From wire.Peer
	Msg  *wire.Message // InputMessage only
	// Admission is what a connecting client's certificate grants
	// (InputConnected of a client of a closed cluster, change 23).
	Admission *wire.AdmissionBody
	// Observes is set when the connecting client is an observer connection
	// of that client (InputConnected, change 32): it may only read.
	Observes *wire.ClientID
}

// InputKind says what an Input is.
type InputKind uint8

// The kinds of Input.
const (
	InputMessage InputKind = iota
	InputConnected
	InputDisconnected
)
