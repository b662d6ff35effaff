package wire

import "fmt"

// The protocol's version (docs/protocol.md §1, "Versions"). The major
// version names the wire format and the rules: peers of different majors do
// not talk (the QUIC ALPN carries it, so a connection between them fails in
// its TLS handshake, before any protocol message). Minor versions of one
// major only add what an older peer may ignore: fields of unsigned messages
// and message kinds, never anything inside a signed body.
const (
	ProtocolMajor = 1
	// 1.1: Listen.Hold and Update.Released (herd-free listening); 1.2: Proclaim,
	// StatusReply.Proclamations (elections); 1.3: Hello.Observe (observer
	// connections, change 32: a signed flag an older server cannot verify,
	// so it refuses the observer instead of taking it for a session's connection);
	// 1.4: Submit.Refs and MembersReply.Clients (SET-TICKET answers by reference, change 44);
	// 1.5: ViewBody.Epoch and SuspectBody.Epoch (change 43: signed bodies
	// name their epoch, omitted in epoch 0, so a 1.4 peer meets one only
	// once a cluster has changed, and refuses it), EpochNews and
	// ErrCodeEpochMoved, CopyRequest and Copy, and the client's epoch in
	// SessionOpen, Heartbeat, Read and GetSet (unsigned; a 1.4 server
	// ignores it); 1.6: CopySession.Closed (a copy says which sessions
	// their clients closed; a 1.5 server's reports say none were); 1.7:
	// Copy.HWJ (each hw with its J where the member has it, change 47),
	// SessionOpen.Signed and CopySession.Open (a session's TTL signed by
	// its client, change 48); 1.8: EpochNews.Endorsements and Endorse (an
	// epoch counts only with q endorsements of the epoch before's members,
	// change 49: an epoch without them is refused, so a 1.7 peer's news of
	// an epoch changes nothing until a 1.8 peer shows it endorsed), and
	// SessionAck.Epoch (the epoch of the heartbeat acked, change 50), and
	// Status.Epoch (an observer's epoch, shown the later ones, change 51);
	// 1.9: Statement.Mode and Statement.Permits (shared holdings, change
	// 60: a signed body, so a 1.8 server refuses such a statement, and the
	// client asks them only of 1.9 servers; an exclusive statement is
	// encoded as before); 1.10: EpochMember.Endorse and
	// SignedEndorsement.OneTime (forward-secure endorsement keys, change 64:
	// a member's epoch names its keys inside the CA-signed body, omitted
	// for a member without, so an epoch of a cluster made before keeps its
	// bytes; a 1.9 peer refuses an epoch that names keys and, in a cluster
	// with keys, an endorsement by a one-time key, so a cluster upgrades
	// every server before a change, as change 49 asks), EpochConflict and
	// ErrCodeEpochConflict (change 64: a 1.9 peer ignores the code);
	// 1.11: EpochBody.Approvers (the operator's approval keys of an open
	// cluster, change 65: inside the CA-signed body, omitted when empty, so
	// an epoch that names none keeps its bytes and a 1.10 peer refuses one
	// that names some — a cluster upgrades every server and client before
	// such an epoch, and a cluster made with an approver needs 1.11 ones
	// anyway to read its cluster file); 1.12: SessionAck.Newer, Reset and
	// Known (a refusal says how far the client's session numbering has
	// gone, change 67: unsigned fields of a reply, which a 1.11 client
	// ignores).
	ProtocolMinor = 12
)

// Version is a protocol version, sent in the Challenge and the Hello.
type Version struct {
	Major uint16 `cbor:"1,keyasint"`
	Minor uint16 `cbor:"2,keyasint"`
}

// Current is the version this build speaks.
var Current = Version{Major: ProtocolMajor, Minor: ProtocolMinor}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// ALPN is the QUIC application protocol of v's major version: "bq/1".
func (v Version) ALPN() string { return fmt.Sprintf("bq/%d", v.Major) }

// ProtocolVersion is "MAJOR.MINOR" of Current.
func ProtocolVersion() string { return Current.String() }
