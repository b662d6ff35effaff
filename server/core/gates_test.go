package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// The gates a server puts in front of a client's message, every gate
// against every message kind that names a lock or carries a signed object,
// both sides of each (issue 27, point 5): the gate refuses the message with
// its documented code, and the same message from a client (or with an
// object) the gate does not apply to is served.
//
// The rules, in the order fromClient, onSubmit and onProclaim apply them:
//   - observer connections only read: Status, GetSet, Read; everything else
//     is Forbidden, and so is everything once the observed client is banned
//     or revoked; an observer reads only the names its client's certificate
//     allows (docs/protocol.md change 32; observerMay);
//   - a connection that outlived its certificate's window is NotAllowed
//     (change 23; grantValid);
//   - a banned client is Banned (§6);
//   - a revoked client is NotAllowed (change 23);
//   - past its request bucket a client gets Limit client_rate, an Exit too
//     (change 25; allowRequest);
//   - a name outside the certificate is Forbidden — for every kind but the
//     Exit, which only removes (change 23; permitted, lockOf, and onSubmit's
//     and onProclaim's own checks of the signed object's lock);
//   - a new name past max_locks_per_client is Limit — but an Exit at a name
//     the client has nothing at is acked with nothing kept (change 25;
//     lockForClient, onSubmit);
//   - a signed object (a Statement, the election's Proclamation, §11) whose
//     signature fails or that is signed for another cluster is Malformed,
//     and one of another client is Rejected (§1, §6; onSubmit, onProclaim).
//
// Each case is one fresh closed cluster; only server 0 is asked. The owner
// prepares what its message needs (a session, a Doorway, a Ticket, a Held)
// at every server, then the gate is armed — against the owner, or, for the
// other side, against a bystander (banned, revoked, expired, narrowed,
// drained in its place) so that the gate is live but not the owner's.

const (
	gateLock = "g/L"
	gateReq  = 77
)

// gateKind is one kind of client message: what it needs first, how the
// owner's message is made (signed by by, which is the owner unless a gate
// re-signs it), and the answer that serves it.
type gateKind struct {
	name    string
	prepare func(s *scene)
	msg     func(s *scene, by *client) *wire.Message
	served  func(r *wire.Message) bool
}

func submitMsg(st wire.SignedStatement, j []wire.SignedView) *wire.Message {
	return &wire.Message{Submit: &wire.Submit{Req: gateReq, Statement: st, J: j}}
}

func acked(r *wire.Message) bool { return r.Ack != nil && r.Ack.Req == gateReq }

// The columns of every gate's row, in this order.
var gateKinds = []gateKind{
	{"Doorway",
		func(s *scene) { s.open() },
		func(s *scene, by *client) *wire.Message {
			return submitMsg(by.stmt(gateLock, 1, 1, wire.PhaseDoorway, 0, nil), nil)
		},
		func(r *wire.Message) bool { return r.ViewReply != nil && r.ViewReply.Req == gateReq }},
	{"Ticket",
		func(s *scene) { s.j = s.c.doorway(s.owner, gateLock, 1, 1); s.c.flush() },
		func(s *scene, by *client) *wire.Message {
			return submitMsg(by.stmt(gateLock, 1, 1, wire.PhaseTicket, 1, s.j), s.j)
		},
		func(r *wire.Message) bool { return r.MembersReply != nil && r.MembersReply.Req == gateReq }},
	{"Held",
		func(s *scene) { s.c.enterTicket(s.owner, gateLock, 1, 1, 1) },
		func(s *scene, by *client) *wire.Message {
			return submitMsg(by.stmt(gateLock, 1, 1, wire.PhaseHeld, 1, nil), nil)
		},
		acked},
	{"Exit", // the end of a holding
		func(s *scene) { s.hold() },
		func(s *scene, by *client) *wire.Message {
			return submitMsg(by.stmt(gateLock, 1, 1, wire.PhaseExit, 0, nil), nil)
		},
		acked},
	{"Exit∅", // the end of an attempt this server has nothing of (its Doorway was refused here)
		nil,
		func(s *scene, by *client) *wire.Message {
			return submitMsg(by.stmt(gateLock, 1, 1, wire.PhaseExit, 0, nil), nil)
		},
		acked},
	{"Listen",
		func(s *scene) { s.c.enterTicket(s.owner, gateLock, 1, 1, 1) },
		func(s *scene, _ *client) *wire.Message {
			return &wire.Message{Listen: &wire.Listen{Req: gateReq, Lock: gateLock, Session: 1, Attempt: 1}}
		},
		func(r *wire.Message) bool { return r.Update != nil && r.Update.Req == gateReq }},
	{"GetSet",
		nil,
		func(s *scene, _ *client) *wire.Message {
			return &wire.Message{GetSet: &wire.GetSet{Req: gateReq, Lock: gateLock}}
		},
		func(r *wire.Message) bool { return r.Update != nil && r.Update.Req == gateReq }},
	{"Read",
		func(s *scene) { s.c.doorway(s.owner, gateLock, 1, 1) },
		func(s *scene, _ *client) *wire.Message {
			return &wire.Message{Read: &wire.Read{Req: gateReq, Lock: gateLock, Client: s.owner.id}}
		},
		func(r *wire.Message) bool {
			return r.ReadReply != nil && r.ReadReply.Req == gateReq && r.ReadReply.Statement != nil
		}},
	{"Status",
		func(s *scene) { s.c.doorway(s.owner, gateLock, 1, 1) },
		func(s *scene, _ *client) *wire.Message {
			return &wire.Message{Status: &wire.Status{Req: gateReq, Lock: gateLock}}
		},
		func(r *wire.Message) bool {
			return r.StatusReply != nil && r.StatusReply.Req == gateReq && len(r.StatusReply.Members) == 1
		}},
	{"Proclaim",
		func(s *scene) { s.hold() },
		func(s *scene, by *client) *wire.Message {
			return &wire.Message{Proclaim: &wire.Proclaim{Req: gateReq, Proclamation: by.proclamation(gateLock, 1, 1, 1, 1, "v")}}
		},
		acked},
}

// A row's cells, one per kind: the code the armed gate refuses with, or
//
//	served  the gate does not apply to this kind: served on both sides
//	exempt  the documented exception: served although the gate is armed
//	-       no such message (no signed object to break; or an observer,
//	        which may not send it at all, row "observer")
var gateCodes = map[string]wire.ErrorCode{
	"Forbidden":  wire.ErrCodeForbidden,
	"NotAllowed": wire.ErrCodeNotAllowed,
	"Banned":     wire.ErrCodeBanned,
	"Limit":      wire.ErrCodeLimit,
	"Malformed":  wire.ErrCodeMalformed,
	"Rejected":   wire.ErrCodeRejected,
}

// gate is one rule. arm makes it apply (armed) or not, and returns who
// sends which message; msg makes the owner's message, signed by by.
type gate struct {
	name   string
	detail string // in the refusal: this gate refused, not a later check
	before func(s *scene, armed bool)
	arm    func(s *scene, armed bool, msg func(by *client) *wire.Message) (wire.ClientID, *wire.Message)
	row    string
}

var gates = []gate{
	//     Doorway     Ticket      Held        Exit        Exit∅       Listen      GetSet      Read        Status      Proclaim
	{row: "Forbidden   Forbidden   Forbidden   Forbidden   Forbidden   Forbidden   served      served      served      Forbidden",
		name: "observer", detail: "observer connection only reads", arm: fromObserver},
	{row: "-           -           -           -           -           -           Forbidden   Forbidden   Forbidden   -",
		name: "observer-name", detail: "may not use lock", arm: observerNarrow},
	{row: "-           -           -           -           -           -           Forbidden   Forbidden   Forbidden   -",
		name: "observer-of-banned", detail: "ignores it and its observers", arm: observerOf((*scene).ban)},
	{row: "-           -           -           -           -           -           Forbidden   Forbidden   Forbidden   -",
		name: "observer-of-revoked", detail: "revoked by the cluster's operator", arm: observerOf((*scene).revoke)},
	{row: "NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed",
		name: "expired", detail: "expired at", before: shortWindow, arm: onClient(pastWindow)},
	{row: "Banned      Banned      Banned      Banned      Banned      Banned      Banned      Banned      Banned      Banned",
		name: "banned", detail: "this server ignores it", arm: onClient((*scene).ban)},
	{row: "NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed  NotAllowed",
		name: "revoked", detail: "revoked by the cluster's operator", arm: onClient((*scene).revoke)},
	{row: "Limit       Limit       Limit       Limit       Limit       Limit       Limit       Limit       Limit       Limit",
		name: "client_rate", detail: "limit client_rate", before: slowRate, arm: onClient((*scene).drain)},
	{row: "Forbidden   Forbidden   Forbidden   exempt      exempt      Forbidden   Forbidden   Forbidden   Forbidden   Forbidden",
		name: "permitted", detail: "may not use lock", arm: onClient((*scene).narrow)},
	// The limit counts names in use: a Ticket, Held, Exit, Listen or
	// Proclaim is of a name the owner's Doorway uses already, and a Read
	// or a Status takes no name.
	{row: "Limit       served      served      served      exempt      served      Limit       served      served      served",
		name: "max_locks_per_client", detail: "limit max_locks_per_client", before: fewLocks, arm: onClient((*scene).fill)},
	{row: "Malformed   Malformed   Malformed   Malformed   Malformed   -           -           -           -           Malformed",
		name: "bad-signature", detail: "bad signature", arm: badSignature},
	{row: "Malformed   Malformed   Malformed   Malformed   Malformed   -           -           -           -           Malformed",
		name: "other-cluster", detail: "signed for another cluster", arm: otherCluster},
	{row: "Rejected    Rejected    Rejected    Rejected    Rejected    -           -           -           -           Rejected",
		name: "other-client", detail: "only its own", arm: otherClient},
}

func TestGatesEveryKindBothSides(t *testing.T) {
	for _, g := range gates {
		cells := strings.Fields(g.row)
		require.Len(t, cells, len(gateKinds), g.name)
		for i, k := range gateKinds {
			cell := cells[i]
			if cell == "-" {
				continue
			}
			code, refused := gateCodes[cell]
			require.True(t, refused || cell == "served" || cell == "exempt", "%s: cell %q", g.name, cell)
			t.Run(g.name+"/"+k.name, func(t *testing.T) {
				r := runGate(t, g, k, true)
				if refused {
					require.NotNil(t, r.Error, "armed: %s", r)
					require.Equal(t, code, r.Error.Code, "armed: %s", r.Error.Detail)
					require.Equal(t, uint64(gateReq), r.Error.Req)
					require.Contains(t, r.Error.Detail, g.detail)
				} else {
					require.True(t, k.served(r), "armed, but %s: %s", cell, r)
				}
				r = runGate(t, g, k, false)
				require.True(t, k.served(r), "not armed: %s", r)
			})
		}
	}
}

// runGate prepares k's message in a fresh cluster, arms g (or not), sends
// the message to server 0, and returns its one answer.
func runGate(t *testing.T, g gate, k gateKind, armed bool) *wire.Message {
	c := newClosedCluster(t, 4, 1)
	s := &scene{t: t, c: c, owner: c.newClient(), bystander: c.newClient(), start: c.now, window: map[wire.ClientID]time.Duration{}}
	if g.before != nil {
		g.before(s, armed)
	}
	c.connect(s.owner, s.grant(s.owner, "g/**"))
	c.connect(s.bystander, s.grant(s.bystander, "g/**"))
	if k.prepare != nil {
		k.prepare(s)
	}
	from, m := g.arm(s, armed, func(by *client) *wire.Message { return k.msg(s, by) })
	c.replies(from)
	c.fromClient(0, from, m)
	rs := c.replies(from)
	require.Len(t, rs, 1, "armed=%t %s", armed, m)
	return rs[0]
}

// scene is one case's cluster, its two clients and what the owner prepared.
type scene struct {
	t                *testing.T
	c                *cluster
	owner, bystander *client
	start            time.Time
	window           map[wire.ClientID]time.Duration // a certificate's NotAfter, from start; an hour if unset
	j                []wire.SignedView               // the owner's views, for its Ticket
}

// who is the client the gate is armed against: the owner, or, on the side
// the gate does not apply to, the bystander.
func (s *scene) who(armed bool) *client {
	if armed {
		return s.owner
	}
	return s.bystander
}

func (s *scene) grant(cl *client, pattern string) *wire.AdmissionBody {
	name, w := "bystander", time.Hour
	if cl == s.owner {
		name = "owner"
	}
	if d, ok := s.window[cl.id]; ok {
		w = d
	}
	return &wire.AdmissionBody{Name: name, Client: cl.id, Locks: []string{pattern},
		NotBefore: s.start.Add(-time.Hour).UnixMilli(), NotAfter: s.start.Add(w).UnixMilli()}
}

// step0 delivers a connection event at server 0.
func (s *scene) step0(in Input) { s.c.effects(0, s.c.cores[0].Step(s.c.now, in)) }

// open opens the owner's session 1 at server 0.
func (s *scene) open() {
	s.c.fromClient(0, s.owner.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 5000}})
	s.c.replies(s.owner.id)
}

// hold makes the owner hold the lock (ticket 1) at every server.
func (s *scene) hold() {
	s.c.enterTicket(s.owner, gateLock, 1, 1, 1)
	s.c.submitAll(s.owner, s.owner.stmt(gateLock, 1, 1, wire.PhaseHeld, 1, nil))
}

// ban bans cl at server 0 on a peer's evidence.
func (s *scene) ban(cl *client) {
	a, b := cl.stmt("g/ban", 9, 1, wire.PhaseTicket, 1, nil), cl.stmt("g/ban", 9, 1, wire.PhaseTicket, 2, nil)
	s.c.fromServer(0, 3, &wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceEquivocation, A: a, B: &b}})
	s.c.drop()
	require.True(s.t, s.c.cores[0].Banned(cl.id))
}

// revoke hands server 0 the client CA's revocation of cl.
func (s *scene) revoke(cl *client) {
	s.c.fromServer(0, 1, &wire.Message{Revoke: &wire.Revoke{Revocation: s.c.revocation(cl, s.c.clientCA)}})
	s.c.drop()
	require.Contains(s.t, s.c.cores[0].Revoked(), cl.id)
}

// narrow reconnects cl to server 0 with a certificate for h/** only.
func (s *scene) narrow(cl *client) {
	s.step0(Input{Kind: InputDisconnected, From: wire.ClientPeer(cl.id)})
	s.step0(Input{Kind: InputConnected, From: wire.ClientPeer(cl.id), Admission: s.grant(cl, "h/**")})
}

// drain spends cl's request bucket at server 0 (slowRate) until refused.
func (s *scene) drain(cl *client) {
	for i := 0; ; i++ {
		require.Less(s.t, i, 100)
		s.c.fromClient(0, cl.id, &wire.Message{Status: &wire.Status{Req: 1}})
		if codes := errorCodes(s.c.replies(cl.id)); len(codes) > 0 {
			require.Equal(s.t, []wire.ErrorCode{wire.ErrCodeLimit}, codes)
			return
		}
	}
}

// fill makes cl use new names at server 0 (fewLocks) until one is refused.
func (s *scene) fill(cl *client) {
	for i := 0; ; i++ {
		require.Less(s.t, i, 100)
		s.c.fromClient(0, cl.id, &wire.Message{GetSet: &wire.GetSet{Req: 1, Lock: fmt.Sprint("g/fill/", i)}})
		if codes := errorCodes(s.c.replies(cl.id)); len(codes) > 0 {
			require.Equal(s.t, []wire.ErrorCode{wire.ErrCodeLimit}, codes)
			return
		}
	}
}

func slowRate(s *scene, _ bool) { s.c.cores[0].cfg.ClientRate, s.c.cores[0].cfg.ClientBurst = 1, 40 }
func fewLocks(s *scene, _ bool) { s.c.cores[0].cfg.MaxLocksPerClient = 4 }

// shortWindow gives the armed-against client a certificate of one second;
// pastWindow lets that second pass while it is connected.
func shortWindow(s *scene, armed bool) { s.window[s.who(armed).id] = time.Second }
func pastWindow(s *scene, _ *client) {
	require.True(s.t, s.c.now.Before(s.start.Add(time.Second)), "prepared within the window")
	s.c.now = s.start.Add(time.Second - time.Millisecond) // fromClient adds the last millisecond
}

// onClient arms f against the owner (or the bystander) and sends the
// owner's message.
func onClient(f func(s *scene, cl *client)) func(*scene, bool, func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	return func(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
		f(s, s.who(armed))
		return s.owner.id, msg(s.owner)
	}
}

// observer connects an observer connection of the owner to server 0, with
// a certificate for pattern.
func (s *scene) observer(pattern string) wire.ClientID {
	obs := wire.ObserverID(s.owner.id, []byte("gates"))
	s.step0(Input{Kind: InputConnected, From: wire.ClientPeer(obs), Admission: s.grant(s.owner, pattern), Observes: &s.owner.id})
	return obs
}

// fromObserver sends the owner's message on an observer connection of the
// owner, or, on the other side, on the owner's own connection.
func fromObserver(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	if !armed {
		return s.owner.id, msg(s.owner)
	}
	return s.observer("g/**"), msg(s.owner)
}

// observerNarrow sends it on an observer connection whose certificate
// does not (or, on the other side, does) allow the name.
func observerNarrow(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	pattern := "g/**"
	if armed {
		pattern = "h/**"
	}
	return s.observer(pattern), msg(s.owner)
}

// observerOf sends it on an observer connection of the owner after f
// struck the owner (or, on the other side, the bystander).
func observerOf(f func(s *scene, cl *client)) func(*scene, bool, func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	return func(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
		obs := s.observer("g/**")
		f(s, s.who(armed))
		return obs, msg(s.owner)
	}
}

// badSignature sends the owner's message with one bit of its signed
// object's signature flipped.
func badSignature(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	m := msg(s.owner)
	if armed {
		var sig []byte
		switch {
		case m.Submit != nil:
			sig = m.Submit.Statement.Signed.Sig
		case m.Proclaim != nil:
			sig = m.Proclaim.Proclamation.Signed.Sig
		}
		require.NotEmpty(s.t, sig)
		sig[len(sig)/2] ^= 1
	}
	return s.owner.id, m
}

// otherCluster sends the owner's message signed by its key for another
// cluster.
func otherCluster(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	if !armed {
		return s.owner.id, msg(s.owner)
	}
	foreign := *s.owner
	foreign.cluster[0] ^= 1
	return s.owner.id, msg(&foreign)
}

// otherClient has the bystander send the owner's object as its own.
func otherClient(s *scene, armed bool, msg func(*client) *wire.Message) (wire.ClientID, *wire.Message) {
	if !armed {
		return s.owner.id, msg(s.owner)
	}
	return s.bystander.id, msg(s.owner)
}
