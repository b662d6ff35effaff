// Package wire holds every message bq sends, its strict codec and its
// one-line rendering (docs/protocol.md §1–§6). This file lists them all.
//
// A frame on the wire is one Message: a union with exactly one field set.
// Signed objects (statements, views, votes) are crypto.Signed values whose
// bodies are the *Body types below; they are verified before they are decoded
// (see verify.go).
package wire

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/bq-lock/bq/crypto"
)

// Limits of the protocol itself (docs/protocol.md §3.2, §8).
const (
	// TicketCap: tickets at or above it are inflation and are refused.
	TicketCap = uint64(1) << 62
	// MaxLockName is the longest lock name in bytes.
	MaxLockName = 256
	// MaxDetail caps human-readable error text.
	MaxDetail = 1024
	// NonceSize is the size of a server's Hello challenge.
	NonceSize = 32
)

// Phase is where a client's statement puts it in the bakery (docs/protocol.md §2).
type Phase uint8

// The phases, in timestamp order.
const (
	PhaseNone Phase = iota
	PhaseDoorway
	PhaseTicket
	PhaseHeld
	PhaseExit
)

func (p Phase) String() string {
	switch p {
	case PhaseNone:
		return "none"
	case PhaseDoorway:
		return "Doorway"
	case PhaseTicket:
		return "Ticket"
	case PhaseHeld:
		return "Held"
	case PhaseExit:
		return "Exit"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// ---------------------------------------------------------------------------
// Signed bodies.

// Statement is a client's signed register value for one lock (docs/protocol.md §2).
// Its timestamp is (Session, Attempt, Phase).
type Statement struct {
	Lock    string   `cbor:"1,keyasint"`
	Client  ClientID `cbor:"2,keyasint"`
	Session uint64   `cbor:"3,keyasint"`
	Attempt uint64   `cbor:"4,keyasint"`
	Phase   Phase    `cbor:"5,keyasint"`
	// N is the ticket number (Ticket, Held); zero otherwise.
	N uint64 `cbor:"6,keyasint,omitempty"`
	// JHash is the hash of the justification (Ticket only).
	JHash *Digest `cbor:"7,keyasint,omitempty"`
	// Cluster is the cluster this statement is for (docs/protocol.md §1).
	Cluster ClusterID `cbor:"8,keyasint"`
	// Mode and Permits are the holding asked for (Doorway, Ticket, Held;
	// docs/protocol.md change 60): absent for exclusive, so an exclusive
	// statement is encoded as in protocol 1.8.
	Mode    Mode   `cbor:"9,keyasint,omitempty"`
	Permits uint32 `cbor:"10,keyasint,omitempty"`
}

func (s *Statement) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s %s sess=%d att=%d", s.Phase, s.Lock, s.Client, s.Session, s.Attempt)
	if s.Phase == PhaseTicket || s.Phase == PhaseHeld {
		fmt.Fprintf(&b, " N=%d", s.N)
	}
	if s.JHash != nil {
		fmt.Fprintf(&b, " J=%s", s.JHash)
	}
	if s.Mode != ModeExclusive {
		fmt.Fprintf(&b, " %s", HoldingOf(s))
	}
	b.WriteString(")")
	return b.String()
}

// SignedStatement is a Statement signed by the client whose key it carries.
// INVARIANT (after Verify): ClientIDOf(Key) == body.Client.
type SignedStatement struct {
	Key    crypto.PublicKey `cbor:"1,keyasint"`
	Signed crypto.Signed    `cbor:"2,keyasint"`
}

// ViewBody is a server's signed account of a lock after applying a Doorway
// (docs/protocol.md §3.1). A client's justification J is q of these.
type ViewBody struct {
	Lock       string   `cbor:"1,keyasint"`
	For        ClientID `cbor:"2,keyasint"`
	ForSession uint64   `cbor:"3,keyasint"`
	ForAttempt uint64   `cbor:"4,keyasint"`
	Server     ServerID `cbor:"5,keyasint"`
	// Seq numbers the changes this server applied to the lock.
	Seq uint64 `cbor:"6,keyasint"`
	// Members holds member statements of the active set. A correct server
	// puts only the highest numbered member's statement (docs/protocol.md
	// change 16: N = 1 + max needs no other); a client takes any list.
	Members []SignedStatement `cbor:"7,keyasint"`
	// HW is the highest Ticket this server ever accepted for the lock (nil if none).
	HW *SignedStatement `cbor:"8,keyasint,omitempty"`
	// Cluster is the signer's cluster (docs/protocol.md §1).
	Cluster ClusterID `cbor:"9,keyasint"`
	// Epoch is the configuration the signer served in (change 43); omitted
	// in epoch 0, so a View of epoch 0 has the bytes it always had.
	Epoch uint64 `cbor:"10,keyasint,omitempty"`
}

func (v *ViewBody) String() string {
	hw := "-"
	if v.HW != nil {
		hw = "yes"
	}
	return fmt.Sprintf("View(%s for=%s sess=%d att=%d by=%s seq=%d members=%d hw=%s%s)",
		v.Lock, v.For, v.ForSession, v.ForAttempt, v.Server, v.Seq, len(v.Members), hw, epochSuffix(v.Epoch))
}

// epochSuffix names an epoch after the first in a signed body's string.
func epochSuffix(e uint64) string {
	if e == 0 {
		return ""
	}
	return fmt.Sprintf(" epoch=%d", e)
}

// SignedView is a ViewBody signed by Server.
type SignedView struct {
	Server ServerID      `cbor:"1,keyasint"`
	Signed crypto.Signed `cbor:"2,keyasint"`
}

// SuspectReason says why a server voted to reset a client's session.
type SuspectReason uint8

// The reasons for a Suspect vote (docs/protocol.md §5).
const (
	SuspectMute    SuspectReason = 1 // the lease expired
	SuspectDoorway SuspectReason = 2 // stayed in the Doorway past the deadline
)

func (r SuspectReason) String() string {
	switch r {
	case SuspectMute:
		return "mute"
	case SuspectDoorway:
		return "doorway-deadline"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// SuspectBody is a server's vote that a client's session be reset (docs/protocol.md §5).
type SuspectBody struct {
	Client  ClientID      `cbor:"1,keyasint"`
	Session uint64        `cbor:"2,keyasint"`
	Server  ServerID      `cbor:"3,keyasint"`
	Reason  SuspectReason `cbor:"4,keyasint"`
	// Cluster is the signer's cluster (docs/protocol.md §1).
	Cluster ClusterID `cbor:"5,keyasint"`
	// Epoch is the configuration the signer voted in (change 43): votes of
	// one epoch make a certificate; omitted in epoch 0.
	Epoch uint64 `cbor:"6,keyasint,omitempty"`
}

func (s *SuspectBody) String() string {
	return fmt.Sprintf("Suspect(%s sess=%d by=%s %s%s)", s.Client, s.Session, s.Server, s.Reason, epochSuffix(s.Epoch))
}

// SignedSuspect is a SuspectBody signed by Server.
type SignedSuspect struct {
	Server ServerID      `cbor:"1,keyasint"`
	Signed crypto.Signed `cbor:"2,keyasint"`
}

// ResetCertificate is Suspect votes on (Client, Session) from q distinct
// servers. It voids every statement of Client with session ≤ Session.
type ResetCertificate struct {
	Client  ClientID        `cbor:"1,keyasint"`
	Session uint64          `cbor:"2,keyasint"`
	Votes   []SignedSuspect `cbor:"3,keyasint"`
}

func (r *ResetCertificate) String() string {
	ids := make([]string, len(r.Votes))
	for i, v := range r.Votes {
		ids[i] = v.Server.String()
	}
	return fmt.Sprintf("Reset(%s sess=%d votes=[%s])", r.Client, r.Session, strings.Join(ids, " "))
}

// EvidenceKind names a transferable proof that a client is Byzantine (docs/protocol.md §6).
type EvidenceKind uint8

// The kinds of transferable evidence.
const (
	// EvidenceInvalidTicket: A is a Ticket whose justification J is invalid or does not justify its N.
	EvidenceInvalidTicket EvidenceKind = 1
	// EvidenceEquivocation: A and B are different statements with the same timestamp.
	EvidenceEquivocation EvidenceKind = 2
)

func (k EvidenceKind) String() string {
	switch k {
	case EvidenceInvalidTicket:
		return "invalid-ticket"
	case EvidenceEquivocation:
		return "equivocation"
	}
	return fmt.Sprintf("evidence(%d)", uint8(k))
}

// Evidence proves to any third party that a client is Byzantine.
type Evidence struct {
	Kind EvidenceKind     `cbor:"1,keyasint"`
	A    SignedStatement  `cbor:"2,keyasint"`
	B    *SignedStatement `cbor:"3,keyasint,omitempty"`
	J    []SignedView     `cbor:"4,keyasint,omitempty"`
}

func (e *Evidence) String() string {
	return fmt.Sprintf("Evidence(%s J=%d pair=%t)", e.Kind, len(e.J), e.B != nil)
}

// ---------------------------------------------------------------------------
// Connection set-up (docs/protocol.md §1).

// Challenge is the server's first message on a client connection.
type Challenge struct {
	Server ServerID `cbor:"1,keyasint"`
	Nonce  []byte   `cbor:"2,keyasint"`
	// Cluster is the server's cluster, so a client dialing the wrong one
	// hears which it reached (docs/protocol.md §1).
	Cluster ClusterID `cbor:"3,keyasint"`
	// Version is the protocol version the server speaks (§1, "Versions").
	Version Version `cbor:"4,keyasint"`
}

func (c *Challenge) String() string { return fmt.Sprintf("Challenge(by=%s v%s)", c.Server, c.Version) }

// Hello binds a connection to a ClientID and a cluster: Sig is the client's
// signature, in domain DomainHello, over HelloBody{Nonce, Exporter, Cluster}.
type Hello struct {
	Key crypto.PublicKey `cbor:"1,keyasint"`
	Sig []byte           `cbor:"2,keyasint"`
	// Cluster is the cluster the client signed for, so a server of another
	// cluster can say so instead of "bad signature".
	Cluster ClusterID `cbor:"3,keyasint"`
	// Version is the protocol version the client speaks (§1, "Versions").
	Version Version `cbor:"4,keyasint"`
	// Admission is the client's admission certificate, for a closed
	// cluster (change 23); an open one ignores it.
	Admission *crypto.Signed `cbor:"5,keyasint,omitempty"`
	// Observe asks for an observer connection (change 32): it only reads,
	// opens no session, and is bound to ObserverID(key's id, nonce), not to
	// the key's own id, so it never displaces the key's session connection.
	// It is also in the signed HelloBody.
	Observe bool `cbor:"6,keyasint,omitempty"`
}

func (h *Hello) String() string {
	if h.Observe {
		return fmt.Sprintf("Hello(%s observer)", ClientIDOf(h.Key))
	}
	return fmt.Sprintf("Hello(%s)", ClientIDOf(h.Key))
}

// HelloBody is what a Hello signs: the server's nonce and the connection's
// TLS exporter value.
type HelloBody struct {
	Nonce    []byte `cbor:"1,keyasint"`
	Exporter []byte `cbor:"2,keyasint"`
	// Cluster is the cluster the client means to talk to (docs/protocol.md §1):
	// the session the connection carries, and every ack on it, is bound to it.
	Cluster ClusterID `cbor:"3,keyasint"`
	// Observe: the key asks for an observer connection (change 32); signed,
	// so the connection's kind is the key holder's choice.
	Observe bool `cbor:"4,keyasint,omitempty"`
}

// Welcome accepts a Hello.
type Welcome struct {
	Client ClientID `cbor:"1,keyasint"`
}

func (w *Welcome) String() string { return fmt.Sprintf("Welcome(%s)", w.Client) }

// ---------------------------------------------------------------------------
// Sessions and leases (docs/protocol.md §5).

// SessionOpen opens (or re-opens after a reconnect) a session with a lease of TTLMillis.
type SessionOpen struct {
	Session   uint64 `cbor:"1,keyasint"`
	TTLMillis uint32 `cbor:"2,keyasint"`
	// Epoch is the epoch the client is in (change 43; omitted in epoch 0):
	// a server that knows later ones shows them. Unsigned: a client that
	// lies about it only gets shown epochs, or not.
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
	// Signed is the client's signature on the session and its TTL (change
	// 48; protocol 1.7, absent from an older client): the server keeps it,
	// so that a copy shows the TTL as the client asked it, which a faulty
	// member cannot raise.
	Signed *SignedOpen `cbor:"4,keyasint,omitempty"`
}

func (s *SessionOpen) String() string {
	signed := ""
	if s.Signed != nil {
		signed = " signed"
	}
	return fmt.Sprintf("SessionOpen(sess=%d ttl=%dms%s%s)", s.Session, s.TTLMillis, epochSuffix(s.Epoch), signed)
}

// Heartbeat renews the lease of a session.
type Heartbeat struct {
	Session uint64 `cbor:"1,keyasint"`
	Seq     uint64 `cbor:"2,keyasint"`
	// Epoch is the epoch the client is in, as in SessionOpen.
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
}

func (h *Heartbeat) String() string {
	return fmt.Sprintf("Heartbeat(sess=%d seq=%d%s)", h.Session, h.Seq, epochSuffix(h.Epoch))
}

// SessionClose ends a session: its owner promises to send nothing more in
// it, so servers may vote to reset it at once instead of after its lease.
// Servers answer with an Ack of Req.
type SessionClose struct {
	Req     uint64 `cbor:"1,keyasint"`
	Session uint64 `cbor:"2,keyasint"`
}

func (s *SessionClose) String() string {
	return fmt.Sprintf("SessionClose(req=%d sess=%d)", s.Req, s.Session)
}

// SessionAck answers SessionOpen (Seq 0) and every Heartbeat. LeaseOK is false
// once this server suspected the session; the client then counts it against its lease guarantee.
type SessionAck struct {
	Session uint64 `cbor:"1,keyasint"`
	Seq     uint64 `cbor:"2,keyasint"`
	LeaseOK bool   `cbor:"3,keyasint"`
	// MaxHoldMillis, in the answer to a SessionOpen, is the max-hold this
	// server applies to the client (change 24); zero is none.
	MaxHoldMillis uint64 `cbor:"4,keyasint,omitempty"`
	// Epoch echoes the epoch the SessionOpen or Heartbeat answered named
	// (protocol 1.8; omitted in epoch 0): heartbeat numbers start again
	// when a client moves to a new epoch, so an ack of the old epoch still
	// in flight would otherwise count for the new heartbeat of its number,
	// sent later (docs/protocol.md change 50).
	Epoch uint64 `cbor:"5,keyasint,omitempty"`
	// In a refusal (LeaseOK false) because this server knows a newer
	// session of the client, or the session is reset or voted on: how far
	// the client's numbering has gone (docs/protocol.md change 67, protocol
	// 1.12). Newer is the client's own signed open of the highest session
	// this server keeps one of, Reset the certificate that ended the
	// highest session reset here, Known the highest session number this
	// server knows of the client (unsigned: it counts only where f+1
	// servers name one as high).
	Newer *SignedOpen       `cbor:"6,keyasint,omitempty"`
	Reset *ResetCertificate `cbor:"7,keyasint,omitempty"`
	Known uint64            `cbor:"8,keyasint,omitempty"`
}

func (a *SessionAck) String() string {
	if a.Known > 0 {
		return fmt.Sprintf("SessionAck(sess=%d seq=%d ok=%t known=%d)", a.Session, a.Seq, a.LeaseOK, a.Known)
	}
	return fmt.Sprintf("SessionAck(sess=%d seq=%d ok=%t)", a.Session, a.Seq, a.LeaseOK)
}

// ---------------------------------------------------------------------------
// The bakery's accesses (docs/protocol.md §3).

// Submit carries a signed statement: Doorway (GET-TICKET), Ticket with its
// justification J (SET-TICKET), Held, or Exit.
type Submit struct {
	Req       uint64          `cbor:"1,keyasint"`
	Statement SignedStatement `cbor:"2,keyasint"`
	J         []SignedView    `cbor:"3,keyasint,omitempty"`
	// Refs asks that a Ticket be answered with the members' client ids
	// only (MembersReply.Clients, docs/protocol.md change 44; 1.4).
	Refs bool `cbor:"4,keyasint,omitempty"`
}

func (s *Submit) String() string {
	if s.Refs {
		return fmt.Sprintf("Submit(req=%d J=%d refs)", s.Req, len(s.J))
	}
	return fmt.Sprintf("Submit(req=%d J=%d)", s.Req, len(s.J))
}

// ViewReply answers a Doorway with the server's signed View.
type ViewReply struct {
	Req  uint64     `cbor:"1,keyasint"`
	View SignedView `cbor:"2,keyasint"`
}

func (v *ViewReply) String() string {
	return fmt.Sprintf("ViewReply(req=%d by=%s)", v.Req, v.View.Server)
}

// MembersReply answers a Ticket with the lock's members and their highest
// statements, or, when the Submit asked for references (change 44), with
// the holders' statements in Members and the other members' client ids in
// Clients.
type MembersReply struct {
	Req     uint64            `cbor:"1,keyasint"`
	Lock    string            `cbor:"2,keyasint"`
	Members []SignedStatement `cbor:"3,keyasint"`
	Clients []ClientID        `cbor:"4,keyasint,omitempty"`
}

func (m *MembersReply) String() string {
	if m.Clients != nil {
		return fmt.Sprintf("MembersReply(req=%d %s refs=%d)", m.Req, m.Lock, len(m.Clients))
	}
	return fmt.Sprintf("MembersReply(req=%d %s members=%d)", m.Req, m.Lock, len(m.Members))
}

// Ack answers a Held, an Exit, or anything else that only needs a receipt.
type Ack struct {
	Req uint64 `cbor:"1,keyasint"`
}

func (a *Ack) String() string { return fmt.Sprintf("Ack(req=%d)", a.Req) }

// Listen asks for the statements of Members (S' \ {c}) and every later change
// to them, until the client's next message for Lock or T pushes (docs/protocol.md §3.3).
type Listen struct {
	Req     uint64     `cbor:"1,keyasint"`
	Lock    string     `cbor:"2,keyasint"`
	Session uint64     `cbor:"3,keyasint"`
	Attempt uint64     `cbor:"4,keyasint"`
	Members []ClientID `cbor:"5,keyasint"`
	// Hold asks the server to answer once, when no member is ahead of the
	// client there any more (herd-free listening, docs/protocol.md change
	// 27; since protocol 1.1). Without it: a snapshot, then each change.
	Hold bool `cbor:"6,keyasint,omitempty"`
}

func (l *Listen) String() string {
	return fmt.Sprintf("Listen(req=%d %s sess=%d att=%d members=%d hold=%t)", l.Req, l.Lock, l.Session, l.Attempt, len(l.Members), l.Hold)
}

// GetSet asks for the lock's active set and every later change to it
// (the listener pattern of the paper's Algorithm 1), up to T pushes.
type GetSet struct {
	Req  uint64 `cbor:"1,keyasint"`
	Lock string `cbor:"2,keyasint"`
	// Epoch is the epoch the client is in, as in SessionOpen: a reader may
	// have no session, so no Heartbeat to name it in.
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
}

func (g *GetSet) String() string {
	return fmt.Sprintf("GetSet(req=%d %s%s)", g.Req, g.Lock, epochSuffix(g.Epoch))
}

// Update is a snapshot (first) or a push (later) answering a Listen or a GetSet.
type Update struct {
	Req  uint64 `cbor:"1,keyasint"`
	Lock string `cbor:"2,keyasint"`
	// Seq is the server's change counter for the lock when it sent this.
	Seq uint64 `cbor:"3,keyasint"`
	// Statements are highest statements of listened-to clients that changed (all of them in a snapshot).
	Statements []SignedStatement `cbor:"4,keyasint,omitempty"`
	// Absent are listened-to clients not in the active set (no statement, exited, reset, banned).
	Absent []ClientID `cbor:"5,keyasint,omitempty"`
	// Resets are certificates covering listened-to clients.
	Resets []ResetCertificate `cbor:"6,keyasint,omitempty"`
	// Last is set on the last push this subscription will get (the bound T
	// was reached, or the report of a held Listen was released).
	Last bool `cbor:"7,keyasint,omitempty"`
	// Released marks the one answer to a Listen with Hold: no member it
	// watches is ahead of the client at this server (change 27). The client
	// does not listen again for it, as it does after T.
	Released bool `cbor:"8,keyasint,omitempty"`
}

func (u *Update) String() string {
	return fmt.Sprintf("Update(req=%d %s seq=%d stmts=%d absent=%d resets=%d last=%t released=%t)",
		u.Req, u.Lock, u.Seq, len(u.Statements), len(u.Absent), len(u.Resets), u.Last, u.Released)
}

// Read asks for the highest statement of Client for Lock (a register read, §2).
type Read struct {
	Req    uint64   `cbor:"1,keyasint"`
	Lock   string   `cbor:"2,keyasint"`
	Client ClientID `cbor:"3,keyasint"`
	// Epoch is the epoch the client is in, as in GetSet.
	Epoch uint64 `cbor:"4,keyasint,omitempty"`
}

func (r *Read) String() string {
	return fmt.Sprintf("Read(req=%d %s %s%s)", r.Req, r.Lock, r.Client, epochSuffix(r.Epoch))
}

// ReadReply answers a Read; Statement is nil if the server has none, and
// Reset is the certificate that voids it, if any.
type ReadReply struct {
	Req       uint64            `cbor:"1,keyasint"`
	Statement *SignedStatement  `cbor:"2,keyasint,omitempty"`
	Reset     *ResetCertificate `cbor:"3,keyasint,omitempty"`
}

func (r *ReadReply) String() string {
	return fmt.Sprintf("ReadReply(req=%d found=%t reset=%t)", r.Req, r.Statement != nil, r.Reset != nil)
}

// ErrorCode classifies an Error.
type ErrorCode uint16

// Error codes a server sends to a client.
const (
	ErrCodeMalformed  ErrorCode = 1 // the request could not be decoded or was invalid
	ErrCodeRejected   ErrorCode = 2 // the statement was refused (see Detail)
	ErrCodeResend     ErrorCode = 3 // the server lacks the client's latest statement: resend it (§6)
	ErrCodeLimit      ErrorCode = 4 // a resource bound was exceeded (§6)
	ErrCodeBanned     ErrorCode = 5 // the client was judged Byzantine
	ErrCodeSuspected  ErrorCode = 6 // the session was suspected; open a new one
	ErrCodeNoSession  ErrorCode = 7 // the client has no open session here
	ErrCodeNotAllowed ErrorCode = 8 // not admitted (closed cluster) or not a valid peer
	ErrCodeInternal   ErrorCode = 9 // the server failed (e.g. its disk); try again or elsewhere
	// ErrCodeForbidden: the client's admission certificate does not allow
	// the lock name (change 23).
	ErrCodeForbidden ErrorCode = 10
	// ErrCodeEpochMoved: this server sealed its epoch (change 43); the
	// EpochNews it sent just before shows the epochs after it: adopt them
	// and redo the request at the newer epoch's members.
	ErrCodeEpochMoved ErrorCode = 11
	// ErrCodeEpochConflict: this server holds two epochs of one number,
	// each signed by the cluster CA and endorsed by a quorum of the epoch
	// before (docs/protocol.md change 64): keys beyond what bq tolerates
	// have leaked, and it serves neither. The EpochNews it sent just
	// before shows both.
	ErrCodeEpochConflict ErrorCode = 12
)

func (c ErrorCode) String() string {
	switch c {
	case ErrCodeMalformed:
		return "malformed"
	case ErrCodeRejected:
		return "rejected"
	case ErrCodeResend:
		return "resend"
	case ErrCodeLimit:
		return "limit"
	case ErrCodeBanned:
		return "banned"
	case ErrCodeSuspected:
		return "suspected"
	case ErrCodeNoSession:
		return "no-session"
	case ErrCodeNotAllowed:
		return "not-allowed"
	case ErrCodeInternal:
		return "internal"
	case ErrCodeForbidden:
		return "forbidden"
	case ErrCodeEpochMoved:
		return "epoch-moved"
	case ErrCodeEpochConflict:
		return "epoch-conflict"
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// Error answers a request that failed. Req is 0 for errors not tied to one request.
type Error struct {
	Req    uint64    `cbor:"1,keyasint"`
	Code   ErrorCode `cbor:"2,keyasint"`
	Detail string    `cbor:"3,keyasint,omitempty"`
	// Limit says, for ErrCodeLimit, which limit refused the request
	// (docs/protocol.md change 25).
	Limit *Limit `cbor:"4,keyasint,omitempty"`
}

func (e *Error) String() string {
	if e.Limit != nil {
		return fmt.Sprintf("Error(req=%d %s %s %q)", e.Req, e.Code, e.Limit, e.Detail)
	}
	return fmt.Sprintf("Error(req=%d %s %q)", e.Req, e.Code, e.Detail)
}

// Limit names the limit a request ran into (docs/protocol.md change 25).
type Limit struct {
	// Name is the server setting's key, e.g. "max_locks_per_client".
	Name string `cbor:"1,keyasint"`
	// Value is the setting's value (for a rate, per second or per minute
	// as its name says).
	Value uint64 `cbor:"2,keyasint"`
	// RetryAfterMillis is, for a rate, how long until a retry may pass; zero
	// for a live count: the client must use less first.
	RetryAfterMillis uint64 `cbor:"3,keyasint,omitempty"`
}

// MaxLimitName caps a Limit's Name.
const MaxLimitName = 64

func (l *Limit) String() string {
	name := l.Name
	if strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || name == "" {
		name = strconv.Quote(name) // a faulty server's name renders on one line
	}
	if l.RetryAfterMillis > 0 {
		return fmt.Sprintf("%s=%d retry-after=%dms", name, l.Value, l.RetryAfterMillis)
	}
	return fmt.Sprintf("%s=%d", name, l.Value)
}

// ---------------------------------------------------------------------------
// Server to server (docs/protocol.md §3.5): forwarded self-verifying objects.

// Forward carries a statement (with J for a Ticket) that the sender accepted for the first time.
type Forward struct {
	Statement SignedStatement `cbor:"1,keyasint"`
	J         []SignedView    `cbor:"2,keyasint,omitempty"`
}

func (f *Forward) String() string { return fmt.Sprintf("Forward(J=%d)", len(f.J)) }

// MaxAnnounceItems caps the statement references in one Announce.
const MaxAnnounceItems = 1024

// StatementRef names one statement without carrying it: whose, for which
// lock, its timestamp, and the SHA-256 of its signed body. It is a hint, not
// evidence: a receiver only uses it to decide what to ask for.
type StatementRef struct {
	Lock     string   `cbor:"1,keyasint"`
	Client   ClientID `cbor:"2,keyasint"`
	Session  uint64   `cbor:"3,keyasint"`
	Attempt  uint64   `cbor:"4,keyasint"`
	Phase    Phase    `cbor:"5,keyasint"`
	BodyHash Digest   `cbor:"6,keyasint"`
}

// RefOf returns the reference of a verified statement and its signed form.
func RefOf(st *Statement, ss *SignedStatement) StatementRef {
	return StatementRef{Lock: st.Lock, Client: st.Client, Session: st.Session, Attempt: st.Attempt,
		Phase: st.Phase, BodyHash: BodyHash(ss)}
}

// Announce is lazy dissemination (docs/protocol.md §3.5, docs/protocol.md change
// 11): with Want false, the statements the sender accepted lately; with Want
// true, the statements of the receiver's announcement that the sender lacks,
// which the receiver answers with Forwards.
type Announce struct {
	Want  bool           `cbor:"1,keyasint,omitempty"`
	Items []StatementRef `cbor:"2,keyasint"`
}

func (a *Announce) String() string {
	if a.Want {
		return fmt.Sprintf("Announce(want=%d)", len(a.Items))
	}
	return fmt.Sprintf("Announce(have=%d)", len(a.Items))
}

// ---------------------------------------------------------------------------
// The union.

// Message is one frame: exactly one field is set.
type Message struct {
	Challenge    *Challenge        `cbor:"1,keyasint,omitempty"`
	Hello        *Hello            `cbor:"2,keyasint,omitempty"`
	Welcome      *Welcome          `cbor:"3,keyasint,omitempty"`
	SessionOpen  *SessionOpen      `cbor:"4,keyasint,omitempty"`
	Heartbeat    *Heartbeat        `cbor:"5,keyasint,omitempty"`
	SessionAck   *SessionAck       `cbor:"6,keyasint,omitempty"`
	Submit       *Submit           `cbor:"7,keyasint,omitempty"`
	ViewReply    *ViewReply        `cbor:"8,keyasint,omitempty"`
	MembersReply *MembersReply     `cbor:"9,keyasint,omitempty"`
	Ack          *Ack              `cbor:"10,keyasint,omitempty"`
	Listen       *Listen           `cbor:"11,keyasint,omitempty"`
	GetSet       *GetSet           `cbor:"12,keyasint,omitempty"`
	Update       *Update           `cbor:"13,keyasint,omitempty"`
	Read         *Read             `cbor:"14,keyasint,omitempty"`
	ReadReply    *ReadReply        `cbor:"15,keyasint,omitempty"`
	Error        *Error            `cbor:"16,keyasint,omitempty"`
	Forward      *Forward          `cbor:"17,keyasint,omitempty"`
	Suspect      *SignedSuspect    `cbor:"18,keyasint,omitempty"`
	Reset        *ResetCertificate `cbor:"19,keyasint,omitempty"`
	Evidence     *Evidence         `cbor:"20,keyasint,omitempty"`
	Status       *Status           `cbor:"21,keyasint,omitempty"`
	StatusReply  *StatusReply      `cbor:"22,keyasint,omitempty"`
	SessionClose *SessionClose     `cbor:"23,keyasint,omitempty"`
	Announce     *Announce         `cbor:"24,keyasint,omitempty"`
	Revoke       *Revoke           `cbor:"25,keyasint,omitempty"`
	Proclaim     *Proclaim         `cbor:"26,keyasint,omitempty"`
	EpochNews    *EpochNews        `cbor:"27,keyasint,omitempty"`
	CopyRequest  *CopyRequest      `cbor:"28,keyasint,omitempty"`
	Copy         *Copy             `cbor:"29,keyasint,omitempty"`
	Endorse      *Endorse          `cbor:"30,keyasint,omitempty"`
}

// Body returns the one set field, or nil if none or several are set.
func (m *Message) Body() fmt.Stringer {
	found, n := m.body()
	if n != 1 {
		return nil
	}
	return found
}

// kinds is the number of known kinds set in m.
func (m *Message) kinds() int {
	_, n := m.body()
	return n
}

func (m *Message) body() (fmt.Stringer, int) {
	var found fmt.Stringer
	n := 0
	set := func(s fmt.Stringer, isNil bool) {
		if !isNil {
			found = s
			n++
		}
	}
	set(m.Challenge, m.Challenge == nil)
	set(m.Hello, m.Hello == nil)
	set(m.Welcome, m.Welcome == nil)
	set(m.SessionOpen, m.SessionOpen == nil)
	set(m.Heartbeat, m.Heartbeat == nil)
	set(m.SessionAck, m.SessionAck == nil)
	set(m.Submit, m.Submit == nil)
	set(m.ViewReply, m.ViewReply == nil)
	set(m.MembersReply, m.MembersReply == nil)
	set(m.Ack, m.Ack == nil)
	set(m.Listen, m.Listen == nil)
	set(m.GetSet, m.GetSet == nil)
	set(m.Update, m.Update == nil)
	set(m.Read, m.Read == nil)
	set(m.ReadReply, m.ReadReply == nil)
	set(m.Error, m.Error == nil)
	set(m.Forward, m.Forward == nil)
	set(m.Suspect, m.Suspect == nil)
	set(m.Reset, m.Reset == nil)
	set(m.Evidence, m.Evidence == nil)
	set(m.Status, m.Status == nil)
	set(m.StatusReply, m.StatusReply == nil)
	set(m.SessionClose, m.SessionClose == nil)
	set(m.Announce, m.Announce == nil)
	set(m.Revoke, m.Revoke == nil)
	set(m.Proclaim, m.Proclaim == nil)
	set(m.EpochNews, m.EpochNews == nil)
	set(m.CopyRequest, m.CopyRequest == nil)
	set(m.Copy, m.Copy == nil)
	set(m.Endorse, m.Endorse == nil)
	return found, n
}

// String renders the message on one line, deterministically.
func (m *Message) String() string {
	if b := m.Body(); b != nil {
		return b.String()
	}
	return "Message(invalid)"
}

func (s *SignedSuspect) String() string { return fmt.Sprintf("SignedSuspect(by=%s)", s.Server) }
