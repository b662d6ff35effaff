package wire_test

import (
	"bytes"
	"crypto/sha256"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The generator: real keys, made deterministically from fixed labels, so
// every encoding and every String() is the same on every run,
// and a valid, fully populated example of every message kind
// (the model is Go's crypto/tls/handshake_messages_test.go).

const testLock = "locks/orders"

// fixture is a cluster of n = 4 servers (f = 1, q = 3) and a few clients.
type fixture struct {
	n, q    int
	servers []*crypto.PrivateKey
	keys    wire.Keyring
	// alice, bob, carol and dave are Ed25519 clients; pq and hybrid use the post-quantum schemes.
	alice, bob, carol, dave *crypto.PrivateKey
	pq, hybrid              *crypto.PrivateKey
	// outsider is a key that is no server's.
	outsider *crypto.PrivateKey
}

var (
	fixtureOnce sync.Once
	theFixture  *fixture
	fixtureErr  error
)

// keyFor derives a key of scheme from label (its seed is SHA-256(label)).
func keyFor(scheme, label string) (*crypto.PrivateKey, error) {
	seed := sha256.Sum256([]byte(label))
	return crypto.PrivateKeyFromSeed(scheme, seed[:])
}

// testCluster is the fixture cluster's id, which every statement the tests
// sign is for.
func testCluster() wire.ClusterID {
	fixtureOnce.Do(buildFixture)
	if theFixture == nil {
		return wire.ClusterID{}
	}
	return theFixture.keys.Cluster
}

func fx(tb testing.TB) *fixture {
	tb.Helper()
	fixtureOnce.Do(buildFixture)
	require.NoError(tb, fixtureErr)
	return theFixture
}

func buildFixture() {
	{
		f := &fixture{n: 4, q: 3}
		mk := func(scheme, label string) *crypto.PrivateKey {
			k, err := keyFor(scheme, label)
			if err != nil && fixtureErr == nil {
				fixtureErr = err
			}
			return k
		}
		var pubs []*crypto.Parsed
		for i := 0; i < f.n; i++ {
			k := mk(crypto.Ed25519, "bq/test/server/"+string(rune('0'+i)))
			f.servers = append(f.servers, k)
			if k != nil {
				pubs = append(pubs, k.Public)
			}
		}
		f.keys = wire.NewKeyring(1, pubs)
		f.alice = mk(crypto.Ed25519, "bq/test/client/alice")
		f.bob = mk(crypto.Ed25519, "bq/test/client/bob")
		f.carol = mk(crypto.Ed25519, "bq/test/client/carol")
		f.dave = mk(crypto.Ed25519, "bq/test/client/dave")
		f.pq = mk(crypto.MLDSA44, "bq/test/client/pq")
		f.hybrid = mk(crypto.Ed25519Dilithium2, "bq/test/client/hybrid")
		f.outsider = mk(crypto.Ed25519, "bq/test/outsider")
		theFixture = f
	}
}

func id(k *crypto.PrivateKey) wire.ClientID { return wire.ClientID(k.Public.ID) }

func digest(label string) *wire.Digest {
	d := wire.Digest(sha256.Sum256([]byte(label)))
	return &d
}

// stmt signs a statement of client k.
func (f *fixture) stmt(tb testing.TB, k *crypto.PrivateKey, phase wire.Phase, sess, att, n uint64, jhash *wire.Digest) wire.SignedStatement {
	tb.Helper()
	s, err := wire.SignStatement(k, testCluster(), &wire.Statement{
		Lock: testLock, Client: id(k), Session: sess, Attempt: att, Phase: phase, N: n, JHash: jhash,
	})
	require.NoError(tb, err)
	return s
}

// sortMembers orders statements by client id, as a View holds them.
func sortMembers(ms []wire.SignedStatement) []wire.SignedStatement {
	sort.Slice(ms, func(i, j int) bool { return wire.ClientIDOf(ms[i].Key).Less(wire.ClientIDOf(ms[j].Key)) })
	return ms
}

// view signs a View by server s for client k's attempt, with members and a high-water mark.
func (f *fixture) view(tb testing.TB, s int, k *crypto.PrivateKey, sess, att uint64) wire.SignedView {
	tb.Helper()
	hw := f.stmt(tb, f.dave, wire.PhaseTicket, 1, 1, 5, digest("dave's J"))
	v, err := wire.SignView(f.servers[s], testCluster(), &wire.ViewBody{
		Lock: testLock, For: id(k), ForSession: sess, ForAttempt: att,
		Server: wire.ServerID(s), Seq: 100 + uint64(s),
		Members: sortMembers([]wire.SignedStatement{
			f.stmt(tb, f.bob, wire.PhaseTicket, 2, 4, 6, digest("bob's J")),
			f.stmt(tb, f.carol, wire.PhaseDoorway, 1, 9, 0, nil),
			f.stmt(tb, k, wire.PhaseDoorway, sess, att, 0, nil),
		}),
		HW: &hw,
	})
	require.NoError(tb, err)
	return v
}

// justification is q Views from servers 0..q-1 for client k's attempt.
func (f *fixture) justification(tb testing.TB, k *crypto.PrivateKey, sess, att uint64) []wire.SignedView {
	tb.Helper()
	j := make([]wire.SignedView, f.q)
	for i := range j {
		j[i] = f.view(tb, i, k, sess, att)
	}
	return j
}

func (f *fixture) vote(tb testing.TB, s int, c wire.ClientID, sess uint64, why wire.SuspectReason) wire.SignedSuspect {
	tb.Helper()
	v, err := wire.SignSuspect(f.servers[s], testCluster(), &wire.SuspectBody{Client: c, Session: sess, Server: wire.ServerID(s), Reason: why})
	require.NoError(tb, err)
	return v
}

// reset is a certificate on (c, sess) with votes by the given servers.
func (f *fixture) reset(tb testing.TB, c wire.ClientID, sess uint64, servers ...int) wire.ResetCertificate {
	tb.Helper()
	r := wire.ResetCertificate{Client: c, Session: sess}
	for i, s := range servers {
		why := wire.SuspectMute
		if i%2 == 1 {
			why = wire.SuspectDoorway
		}
		r.Votes = append(r.Votes, f.vote(tb, s, c, sess, why))
	}
	return r
}

// aliceTicket is alice's Ticket (sess 3, att 2, N 7) and its justification.
func (f *fixture) aliceTicket(tb testing.TB) (wire.SignedStatement, []wire.SignedView) {
	tb.Helper()
	j := f.justification(tb, f.alice, 3, 2)
	h := wire.JustificationHash(j)
	return f.stmt(tb, f.alice, wire.PhaseTicket, 3, 2, 7, &h), j
}

type example struct {
	name string // "<Kind>" or "<Kind>/<variant>"; Kind is the Message field
	msg  *wire.Message
}

func (e example) kind() string { k, _, _ := strings.Cut(e.name, "/"); return k }

// examples returns valid examples of every message kind, in the order of the
// Message fields; together, the examples of a kind set every field of it.
func examples(tb testing.TB) []example {
	tb.Helper()
	f := fx(tb)
	ticket, j := f.aliceTicket(tb)
	bobTicket := f.stmt(tb, f.bob, wire.PhaseTicket, 2, 4, 6, digest("bob's J"))
	carolHeld := f.stmt(tb, f.carol, wire.PhaseHeld, 1, 9, 3, nil)
	cert := f.reset(tb, id(f.carol), 1, 0, 1, 3)
	nonce := []byte(strings.Repeat("N", wire.NonceSize))

	hello := func(k *crypto.PrivateKey) *wire.Hello {
		b, err := crypto.Marshal(wire.HelloBody{Nonce: nonce, Exporter: []byte(strings.Repeat("E", 32)), Cluster: f.keys.Cluster})
		require.NoError(tb, err)
		return &wire.Hello{Key: k.Public.Wire, Sig: k.Sign(crypto.DomainHello, b), Cluster: f.keys.Cluster, Version: wire.Version{Major: 1, Minor: 2}}
	}
	// The client CA of these examples is dave's key.
	admission, err := wire.SignAdmission(f.dave, f.keys.Cluster, &wire.AdmissionBody{Serial: 3, Name: "ci", Client: id(f.bob),
		Locks: []string{"ci/*"}, MaxHoldMillis: 60000, NotBefore: 1_700_000_000_000, NotAfter: 1_800_000_000_000})
	require.NoError(tb, err)
	admitted := func(h *wire.Hello) *wire.Hello { h.Admission = &admission; return h }
	observer := func(k *crypto.PrivateKey) *wire.Hello {
		b, err := crypto.Marshal(wire.HelloBody{Nonce: nonce, Exporter: []byte(strings.Repeat("E", 32)), Cluster: f.keys.Cluster, Observe: true})
		require.NoError(tb, err)
		return &wire.Hello{Key: k.Public.Wire, Sig: k.Sign(crypto.DomainHello, b), Cluster: f.keys.Cluster, Version: wire.Version{Major: 1, Minor: 3}, Observe: true}
	}
	revocation, err := wire.SignRevocation(f.dave, f.keys.Cluster, &wire.RevocationBody{Client: id(f.bob), Name: "ci", At: 1_750_000_000_000})
	require.NoError(tb, err)
	carolSays, err := wire.SignProclamation(f.carol, f.keys.Cluster, &wire.ProclamationBody{Lock: testLock, Client: id(f.carol),
		Session: 1, Attempt: 9, N: 3, Rev: 2, Value: []byte("10.0.0.7:8080")})
	require.NoError(tb, err)
	// Equivocation: a second Ticket of alice with the same timestamp (3, 2, Ticket) and another N.
	equivocal := f.stmt(tb, f.alice, wire.PhaseTicket, 3, 2, 8, ticket2JHash(ticket))

	return []example{
		{"Challenge", &wire.Message{Challenge: &wire.Challenge{Server: 2, Nonce: nonce, Cluster: f.keys.Cluster, Version: wire.Version{Major: 1, Minor: 2}}}},
		{"Hello", &wire.Message{Hello: hello(f.alice)}},
		{"Hello/ML-DSA-44", &wire.Message{Hello: hello(f.pq)}},
		{"Hello/Ed25519-Dilithium2", &wire.Message{Hello: hello(f.hybrid)}},
		{"Hello/admitted", &wire.Message{Hello: admitted(hello(f.bob))}},
		{"Hello/observer", &wire.Message{Hello: admitted(observer(f.bob))}},
		{"Welcome", &wire.Message{Welcome: &wire.Welcome{Client: id(f.alice)}}},
		{"SessionOpen", &wire.Message{SessionOpen: &wire.SessionOpen{Session: 3, TTLMillis: 5000}}},
		{"SessionOpen/epoch", &wire.Message{SessionOpen: &wire.SessionOpen{Session: 3, TTLMillis: 5000, Epoch: 2}}},
		{"SessionOpen/signed", &wire.Message{SessionOpen: &wire.SessionOpen{Session: 3, TTLMillis: 5000, Signed: ptr(f.openOf(tb, 3, 5000))}}},
		{"Heartbeat", &wire.Message{Heartbeat: &wire.Heartbeat{Session: 3, Seq: 17}}},
		{"Heartbeat/epoch", &wire.Message{Heartbeat: &wire.Heartbeat{Session: 3, Seq: 17, Epoch: 2}}},
		{"SessionAck", &wire.Message{SessionAck: &wire.SessionAck{Session: 3, Seq: 17, LeaseOK: true, MaxHoldMillis: 60000, Epoch: 2}}},
		{"SessionAck/numbering", &wire.Message{SessionAck: &wire.SessionAck{Session: 2, LeaseOK: false, Newer: ptr(f.openOf(tb, 3, 5000)), Reset: &cert, Known: 3}}},
		{"Submit", &wire.Message{Submit: &wire.Submit{Req: 5, Statement: ticket, J: j}}},
		{"Submit/refs", &wire.Message{Submit: &wire.Submit{Req: 5, Statement: ticket, J: j, Refs: true}}},
		{"Submit/doorway", &wire.Message{Submit: &wire.Submit{Req: 4, Statement: f.stmt(tb, f.alice, wire.PhaseDoorway, 3, 2, 0, nil)}}},
		{"Submit/held", &wire.Message{Submit: &wire.Submit{Req: 6, Statement: f.stmt(tb, f.alice, wire.PhaseHeld, 3, 2, 7, nil)}}},
		{"Submit/exit", &wire.Message{Submit: &wire.Submit{Req: 7, Statement: f.stmt(tb, f.alice, wire.PhaseExit, 3, 2, 0, nil)}}},
		{"Submit/ML-DSA-44", &wire.Message{Submit: &wire.Submit{Req: 1, Statement: f.stmt(tb, f.pq, wire.PhaseDoorway, 1, 1, 0, nil)}}},
		{"Submit/Ed25519-Dilithium2", &wire.Message{Submit: &wire.Submit{Req: 1, Statement: f.stmt(tb, f.hybrid, wire.PhaseDoorway, 1, 1, 0, nil)}}},
		{"ViewReply", &wire.Message{ViewReply: &wire.ViewReply{Req: 4, View: f.view(tb, 1, f.alice, 3, 2)}}},
		{"MembersReply", &wire.Message{MembersReply: &wire.MembersReply{Req: 5, Lock: testLock,
			Members: sortMembers([]wire.SignedStatement{ticket, bobTicket, carolHeld})}}},
		{"MembersReply/refs", &wire.Message{MembersReply: &wire.MembersReply{Req: 5, Lock: testLock,
			Members: []wire.SignedStatement{carolHeld}, Clients: []wire.ClientID{id(f.alice), id(f.bob)}}}},
		{"Ack", &wire.Message{Ack: &wire.Ack{Req: 6}}},
		{"Listen", &wire.Message{Listen: &wire.Listen{Req: 8, Lock: testLock, Session: 3, Attempt: 2,
			Members: []wire.ClientID{id(f.bob), id(f.carol)}, Hold: true}}},
		{"GetSet", &wire.Message{GetSet: &wire.GetSet{Req: 9, Lock: testLock}}},
		{"GetSet/epoch", &wire.Message{GetSet: &wire.GetSet{Req: 9, Lock: testLock, Epoch: 2}}},
		{"Update", &wire.Message{Update: &wire.Update{Req: 8, Lock: testLock, Seq: 42,
			Statements: []wire.SignedStatement{bobTicket}, Absent: []wire.ClientID{id(f.dave)},
			Resets: []wire.ResetCertificate{cert}, Last: true, Released: true}}},
		{"Read", &wire.Message{Read: &wire.Read{Req: 11, Lock: testLock, Client: id(f.bob)}}},
		{"Read/epoch", &wire.Message{Read: &wire.Read{Req: 11, Lock: testLock, Client: id(f.bob), Epoch: 2}}},
		{"ReadReply", &wire.Message{ReadReply: &wire.ReadReply{Req: 12, Statement: &carolHeld, Reset: &cert}}},
		{"Error", &wire.Message{Error: &wire.Error{Req: 13, Code: wire.ErrCodeResend, Detail: "resend your latest statement for \"locks/orders\""}}},
		{"Error/limit", &wire.Message{Error: &wire.Error{Req: 14, Code: wire.ErrCodeLimit, Detail: "limit client_rate (200/s) reached: retry after 5ms",
			Limit: &wire.Limit{Name: "client_rate", Value: 200, RetryAfterMillis: 5}}}},
		{"Forward", &wire.Message{Forward: &wire.Forward{Statement: ticket, J: j}}},
		{"Suspect", &wire.Message{Suspect: ptr(f.vote(tb, 2, id(f.carol), 1, wire.SuspectDoorway))}},
		{"Reset", &wire.Message{Reset: &cert}},
		{"Evidence", &wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: ticket, J: j}}},
		{"Evidence/equivocation", &wire.Message{Evidence: &wire.Evidence{Kind: wire.EvidenceEquivocation, A: ticket, B: &equivocal}}},
		{"Status", &wire.Message{Status: &wire.Status{Req: 14, Lock: testLock, Epoch: 2}}},
		{"Status/all", &wire.Message{Status: &wire.Status{Req: 15}}},
		{"StatusReply", &wire.Message{StatusReply: &wire.StatusReply{Req: 14, Server: 1, Lock: testLock,
			Members:  sortMembers([]wire.SignedStatement{ticket, bobTicket, carolHeld}),
			Locks:    []wire.LockSummary{{Name: testLock, Members: 3}, {Name: "locks/idle"}},
			Suspects: []wire.ClientID{id(f.carol)}, Banned: []wire.ClientID{id(f.dave), id(f.hybrid)}, More: true,
			Proclamations: []wire.SignedProclamation{carolSays}, Names: []wire.ClientName{{Client: id(f.carol), Name: "nightly"}},
			Serves: 1, Knows: 2}}},
		{"SessionClose", &wire.Message{SessionClose: &wire.SessionClose{Req: 16, Session: 3}}},
		{"Announce", &wire.Message{Announce: &wire.Announce{Items: []wire.StatementRef{
			{Lock: testLock, Client: id(f.alice), Session: 3, Attempt: 2, Phase: wire.PhaseTicket, BodyHash: wire.BodyHash(&ticket)}}}}},
		{"Announce/want", &wire.Message{Announce: &wire.Announce{Want: true, Items: []wire.StatementRef{
			{Lock: testLock, Client: id(f.bob), Session: 2, Attempt: 4, Phase: wire.PhaseTicket, BodyHash: wire.BodyHash(&bobTicket)}}}}},
		{"Revoke", &wire.Message{Revoke: &wire.Revoke{Req: 17, Revocation: revocation}}},
		{"Proclaim", &wire.Message{Proclaim: &wire.Proclaim{Req: 18, Proclamation: carolSays}}},
		{"EpochNews", &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{f.endorsedEpochOne(tb)})}},
		{"Endorse", &wire.Message{Endorse: &wire.Endorse{Proposal: f.epochOne(tb), Approval: ptr(f.approvalOne(tb)), Endorsements: f.endorsedEpochOne(tb).Endorsements}}},
		{"CopyRequest", &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: 2}}},
		{"Copy", &wire.Message{Copy: &wire.Copy{Epoch: 2, Part: 3, Last: true,
			Registers:   []wire.Forward{{Statement: ticket, J: j}, {Statement: carolHeld}},
			HW:          []wire.SignedStatement{bobTicket},
			HWJ:         []wire.Forward{{Statement: ticket, J: j}},
			Certs:       []wire.ResetCertificate{cert},
			Bans:        []wire.Evidence{{Kind: wire.EvidenceInvalidTicket, A: ticket, J: j}, {Kind: wire.EvidenceEquivocation, A: ticket, B: &equivocal}},
			Revocations: []crypto.Signed{revocation},
			Clients: []wire.CopyClient{{Client: id(f.alice), Sessions: []wire.CopySession{{Session: 3, TTLMillis: 5000, Open: ptr(f.openOf(tb, 3, 5000))},
				{Session: 4, TTLMillis: 5000, Closed: true}}, SpokeUpTo: 3, ResetUpTo: 2}},
		}}},
	}
}

// epochOne is epoch 1 of the fixture's cluster, signed by the outsider as
// its CA: server 3 replaced by server 4 (the outsider's key).
func (f *fixture) epochOne(tb testing.TB) crypto.Signed {
	tb.Helper()
	var members []wire.EpochMember
	for i, k := range []*crypto.Parsed{f.keys.Servers[0], f.keys.Servers[1], f.keys.Servers[2], f.outsider.Public} {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i + i/3), Address: "127.0.0.1:7000", Key: k.Wire, Cert: []byte{0x30}})
	}
	s, err := wire.SignEpoch(f.outsider, &wire.EpochBody{Cluster: f.keys.Cluster, Number: 1, Prev: [32]byte(f.keys.Cluster),
		Members: members, F: 1, ClientCAs: []crypto.PublicKey{f.alice.Public.Wire}, NextCA: []byte{0x30}})
	require.NoError(tb, err)
	return s
}

// openOf is alice's signed open of session sess with a TTL of ttl ms.
func (f *fixture) openOf(tb testing.TB, sess uint64, ttl uint32) wire.SignedOpen {
	tb.Helper()
	o, err := wire.SignOpen(f.alice, f.keys.Cluster, sess, ttl)
	require.NoError(tb, err)
	return o
}

// endorsedEpochOne is epochOne endorsed by servers 0–2 of epoch 0.
func (f *fixture) endorsedEpochOne(tb testing.TB) wire.Epoch {
	tb.Helper()
	one := f.epochOne(tb)
	ep := wire.Epoch{Signed: one}
	for s := range 2 {
		es, err := wire.SignEndorsement(f.servers[s], f.keys.Cluster, wire.ServerID(s), 1, one)
		require.NoError(tb, err)
		ep.Endorsements = append(ep.Endorsements, es)
	}
	// The third with a one-time key (change 64).
	seed := sha256.Sum256([]byte("bq-test endorser s2"))
	en, err := wire.NewEndorser(bytes.NewReader(seed[:]), 1, 4)
	require.NoError(tb, err)
	es, err := en.Sign(f.keys.Cluster, 2, 1, one)
	require.NoError(tb, err)
	return wire.Epoch{Signed: one, Endorsements: append(ep.Endorsements, es)}
}

// approvalOne is the approval of epochOne by alice's key as the client CA.
func (f *fixture) approvalOne(tb testing.TB) crypto.Signed {
	tb.Helper()
	a, err := wire.SignApproval(f.alice, f.keys.Cluster, 1, f.epochOne(tb))
	require.NoError(tb, err)
	return a
}

func ptr[T any](v T) *T { return &v }

// ticket2JHash returns a copy of the JHash of a signed Ticket.
func ticket2JHash(s wire.SignedStatement) *wire.Digest {
	st, err := s.Verify(testCluster())
	if err != nil || st.JHash == nil {
		panic("test bug: not a valid Ticket")
	}
	d := *st.JHash
	return &d
}

// messageKinds lists the names of the Message union's fields, in order.
func messageKinds() []string {
	t := reflect.TypeFor[wire.Message]()
	out := make([]string, t.NumField())
	for i := range out {
		out[i] = t.Field(i).Name
	}
	return out
}

// setPaths records every field path (Kind.Field.Sub...) that holds a non-zero value in v.
func setPaths(prefix string, v reflect.Value, into map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			setPaths(prefix, v.Elem(), into)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len(); i++ {
				setPaths(prefix, v.Index(i), into)
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() {
				continue
			}
			p := prefix + "." + t.Field(i).Name
			if !v.Field(i).IsZero() {
				into[p] = true
			}
			setPaths(p, v.Field(i), into)
		}
	}
}

// allPaths lists every field path of type t, the way setPaths names them.
func allPaths(prefix string, t reflect.Type, into map[string]bool) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			allPaths(prefix, t.Elem(), into)
		}
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() {
				continue
			}
			p := prefix + "." + t.Field(i).Name
			into[p] = true
			allPaths(p, t.Field(i).Type, into)
		}
	}
}

// normalizeEmpty sets every empty slice in an omitempty field to nil: the
// codec drops such a field, so after a round trip it comes back nil.
func normalizeEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalizeEmpty(v.Elem())
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len(); i++ {
				normalizeEmpty(v.Index(i))
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf, fv := t.Field(i), v.Field(i)
			if !sf.IsExported() {
				continue
			}
			if fv.Kind() == reflect.Slice && fv.Len() == 0 && !fv.IsNil() && strings.Contains(sf.Tag.Get("cbor"), "omitempty") {
				fv.Set(reflect.Zero(sf.Type))
				continue
			}
			normalizeEmpty(fv)
		}
	}
}

// checkDecoded is the property every successful Decode must have: the
// message re-encodes, decodes to an equal message, and renders on one line.
func checkDecoded(t testing.TB, data []byte, m *wire.Message) {
	t.Helper()
	require.NotNil(t, m.Body(), "Decode accepted %x without exactly one body", data)
	enc, err := wire.Encode(m)
	require.NoError(t, err, "decoded %x but cannot re-encode it", data)
	back, err := wire.Decode(enc)
	require.NoError(t, err, "re-encoding of %x does not decode", data)
	want := *m
	normalizeEmpty(reflect.ValueOf(&want))
	require.Equal(t, &want, back, "round trip of %x", data)
	again, err := wire.Encode(back)
	require.NoError(t, err)
	require.Equal(t, enc, again, "encoding is not a fixed point")
	s := m.String()
	require.NotContains(t, s, "\n")
	require.Equal(t, s, back.String())
}
