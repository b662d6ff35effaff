package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Malice as hooks: a faulty server runs the honest core and
// its Behaviors rewrite what that core would send. Behaviors compose: each
// one rewrites the output of the one before it. A faulty server holds its
// own signing key, so it can sign Views and Suspect votes of its own; it
// cannot forge anyone else's signature.

// Behavior is one way a faulty server misbehaves.
type Behavior interface {
	Name() string
	// Rewrite turns one message the faulty server was about to send into
	// what it sends instead (nil: nothing).
	Rewrite(b *Byz, o core.Outgoing) []core.Outgoing
}

// Ticker is a Behavior that also acts on its own, at every tick of its server.
type Ticker interface {
	Tick(b *Byz) []core.Outgoing
}

// Garbler is a Behavior that tampers with the encoded bytes of what it sends.
type Garbler interface {
	Garble(b *Byz, to wire.Peer, data []byte) []byte
}

// BehaviorInfo describes one behaviour for bqsim -list.
type BehaviorInfo struct {
	Name string
	Doc  string
	New  func() Behavior
}

var behaviors = []BehaviorInfo{
	{"silent", "sends nothing at all (crashed, or withholding everything)", func() Behavior { return silent{} }},
	{"stale", "replays older signed values: older statements in Updates, ReadReplies, MembersReplies, Forwards and in Views it re-signs (with a lower hw); re-sends older Updates; shows every past leader's Held and proclamations in Status replies", func() Behavior { return stale{} }},
	{"lying-membership", "omits every other member from the Views it signs, from MembersReplies and Updates, claims them Absent, and answers Reads with nothing", func() Behavior { return lying{} }},
	{"selective", "acks sessions and heartbeats (so it counts toward leases) but drops every reply to an access", func() Behavior { return selective{} }},
	{"suspect-all", "signs a Suspect vote on every session of every client it sees, and keeps re-sending them", func() Behavior { return suspectAll{} }},
	{"suspect-hidden", "signs a Suspect vote on every session of every client and sends it to the servers only, while it keeps acking the victim's heartbeats as if its lease were fine", func() Behavior { return suspectHidden{} }},
	{"garble", "flips random bytes in a fifth of what it sends", func() Behavior { return garble{} }},
	{"amnesia", "crashes every 1–3 s and restarts with an empty disk (a lost disk: it forgets every statement, vote and ban)", func() Behavior { return amnesia{} }},
	{"equivocate", "signs different Views for different clients: every other member omitted for half of the clients, stale members and hw for the rest", func() Behavior { return equivocate{} }},
	{"forge", "forges signatures: adds an Exit of every member it reports, signed with its own key, to Updates, MembersReplies and ReadReplies; sends Suspect votes in other servers' names", func() Behavior { return forge{} }},
	{"inflate", "holds a colluding client's key and puts that client's Ticket with N = 2^62−1 in every View it signs (as hw), and forwards it", func() Behavior { return inflate{} }},
	{"drop-forwards", "never announces or forwards statements, and never forwards certificates or evidence, to the other servers", func() Behavior { return dropForwards{} }},
	{"forge-reset", "presents reset certificates on every member it reports (its own vote plus votes forged in other servers' names) to clients and servers", func() Behavior { return forgeReset{} }},
	{"oversize", "sends malformed bytes (random, truncated) in a tenth of its messages, and twice a run one message over the 4 MiB limit", func() Behavior { return oversize{} }},
	{"partial-service", "serves only the clients whose id starts with an even byte; drops everything to the others", func() Behavior { return partialService{} }},
	{"slow", "delays everything it sends by 0.8–0.95×TTL: to the edge of the lease", func() Behavior { return slow{} }},
	{"echo-own", "repeats every reply to a client three times, and re-signs each View under two more sequence numbers with no members and no hw: its own valid signatures, many times over", func() Behavior { return echo{} }},
	{"self-cert", "builds reset certificates from its own votes only (one vote repeated q times; q votes on one session that differ in the reason) and shows them to clients and servers", func() Behavior { return selfCert{} }},
	{"self-justify", "holds a colluding client's key and forwards its Tickets with N = 1 justified by q Views that this server alone signed", func() Behavior { return selfJustify{} }},
	{"replay-foreign", "replays what the same client and server keys signed for a second cluster: Exits of every member it reports (to clients, and forwarded to servers) and reset certificates of every server's genuine vote", func() Behavior { return replayForeign{} }},
	{"drip-feed", "holds a silent colluding client's key, as if it had pre-signed Doorways for sessions 1, 2, 3, …, and forwards the next session's Doorway on every lock to every server each time the previous session was reset (docs/protocol.md change 33)", func() Behavior { return dripFeed{} }},
	{"forge-copy", "in the copies it hands out (docs/protocol.md change 47): an hw at 2^62−1 of every lock, signed by its colluding client, with no J and with another lock's J; that client's Ticket of every lock on another lock's J; a session 2^63 with a TTL of 2^32−1 ms for every client, every TTL raised to 2^32−1 ms and some sessions marked closed, counters at 2^62 and forged certificates; parts now and then out of order, and, after a later change, its first copy's parts again", func() Behavior { return &forgeCopy{} }},
	{"vote-at-change", "votes on every session of every client it knows in each epoch after the first, at once, as it starts serving the epoch, to every member, while it acks as a correct member does: the faulty one of the f+1 votes a copied lease gives way to (docs/protocol.md changes 47, 57 and 63)", func() Behavior { return voteAtChange{} }},
	{"fork-epoch", "holds the keys and files of members an epoch left out (given, in a real process) and the cluster CA key, and shows every client and server it knows a forged epoch after each epoch whose members' keys it holds q of, signed by that CA and endorsed by those keys (docs/protocol.md change 64; leaked-keys does this too)", func() Behavior { return &forkEpoch{} }},
	{"leaked-keys", "holds the keys of every member replaced so far, each once the epoch that left it out is served (change 47): where it holds q keys of an epoch, signs with them certificates on every client's session (to servers, clients and in its copies), Views for its colluding client's Tickets, and evidence against every client's Ticket", func() Behavior { return &leakedKeys{} }},
}

// ownStream are the behaviours added since "-byzantine all" first drew from
// a seed's main stream: a stream of their own adds them (generate.go), so
// every earlier seed keeps the scenario it had.
var ownStream = []string{"drip-feed", "forge-copy", "leaked-keys", "vote-at-change", "fork-epoch"}

// drawnBehaviors are the behaviours "-byzantine all" draws from a seed's
// main stream: every one but ownStream.
func drawnBehaviors() []string {
	var out []string
	for _, b := range behaviors {
		if !slices.Contains(ownStream, b.Name) {
			out = append(out, b.Name)
		}
	}
	return out
}

// Behaviors lists every behaviour, in a fixed order.
func Behaviors() []BehaviorInfo { return slices.Clone(behaviors) }

// BehaviorNames lists the behaviours' names.
func BehaviorNames() []string {
	out := make([]string, len(behaviors))
	for i, b := range behaviors {
		out[i] = b.Name
	}
	return out
}

// NewBehavior makes the behaviour called name.
func NewBehavior(name string) (Behavior, error) {
	for _, b := range behaviors {
		if b.Name == name {
			return b.New(), nil
		}
	}
	return nil, fmt.Errorf("sim: no behaviour %q (have %v)", name, BehaviorNames())
}

// Byz is a faulty server's memory and tools, shared by its behaviours.
type Byz struct {
	Self wire.ServerID
	N    int
	Key  *crypto.PrivateKey
	Keys wire.Keyring
	Rand *rand.Rand
	Now  time.Time

	behaviors []Behavior
	// seen: every statement received, per lock and client, ascending by timestamp.
	seen map[string]map[wire.ClientID][]seenStatement
	// sessions: the highest session seen of each client.
	sessions map[wire.ClientID]uint64
	// proclaimed: the last proclamations received per lock and client
	// (elections, docs/protocol.md §11).
	proclaimed map[string]map[wire.ClientID][]wire.SignedProclamation
	// updates: the last honest Updates sent to each client.
	updates map[wire.ClientID][]*wire.Update
	// votes: suspect-all's vote on each client's highest session.
	votes      map[wire.ClientID]vote
	nextResend time.Time
	// TTL is the cluster's lease (slow delays to its edge).
	TTL time.Duration
	// Collude is a colluding Byzantine client's key (inflate).
	Collude *crypto.PrivateKey
	// Foreign signs for a second cluster that shares this one's keys
	// (replay-foreign); nil outside the simulator.
	Foreign *ForeignCluster
	// Chain gives the cluster's epochs, and Leaked the keys of the members
	// they left out that may have leaked by now (leaked-keys); nil outside
	// the simulator and in a run without changes.
	Chain  func() *wire.Chain
	Leaked func() map[wire.ServerID]*crypto.PrivateKey
	// LeakedEndorsers are the endorsement keys (change 64) that leaked
	// with Leaked — what each such member's files held when its key leaked
	// — and this server's own, all of them (a faulty member destroys
	// nothing); CAOf is the cluster CA key that signed each epoch of the
	// chain, every one of which may have leaked (leaked-keys forks with
	// them). Nil outside the simulator.
	LeakedEndorsers func() map[wire.ServerID]*wire.Endorser
	CAOf            func(e uint64) *crypto.PrivateKey
	// Serves is the epoch this server's honest core serves (nil: epoch 0):
	// the faulty server signs its own votes in it, so that they count where
	// a correct member's would (docs/protocol.md change 57: a faulty member
	// votes at once in the epoch after a change).
	Serves func() uint64
	// Acted counts, by behaviour name, what each behaviour did: a message
	// it changed, dropped or added, bytes it garbled, a delay, a wipe. A
	// test that names a behaviour checks it acted (issue 58: a replay or a
	// targeted test whose behaviour never acts tests nothing).
	Acted map[string]int
	// nextAmnesia: when amnesia next wipes the server (zero: not yet set).
	nextAmnesia time.Time
	oversized   int
	// nextSelfTicket, selfAttempt: self-justify's schedule and its colluder's attempts.
	nextSelfTicket time.Time
	selfAttempt    uint64
	// resetUpTo: the highest session of each client a reset certificate
	// this server received ended; dripSession, dripNext: drip-feed's last
	// session fed and when it feeds the next one at the latest.
	resetUpTo   map[wire.ClientID]uint64
	dripSession uint64
	dripNext    time.Time
}

type vote struct {
	session, epoch uint64
	signed         wire.SignedSuspect
}

type seenStatement struct {
	ts quorum.Timestamp
	st *wire.Statement
	ss wire.SignedStatement
}

func newByz(self wire.ServerID, n int, key *crypto.PrivateKey, keys wire.Keyring, r *rand.Rand, names []string) (*Byz, error) {
	b := &Byz{
		Self: self, N: n, Key: key, Keys: keys, Rand: r,
		seen:       make(map[string]map[wire.ClientID][]seenStatement),
		proclaimed: make(map[string]map[wire.ClientID][]wire.SignedProclamation),
		sessions:   make(map[wire.ClientID]uint64),
		updates:    make(map[wire.ClientID][]*wire.Update),
		votes:      make(map[wire.ClientID]vote),
		resetUpTo:  make(map[wire.ClientID]uint64),
	}
	for _, name := range names {
		beh, err := NewBehavior(name)
		if err != nil {
			return nil, err
		}
		b.behaviors = append(b.behaviors, beh)
	}
	return b, nil
}

// observe notes what the faulty server received.
func (b *Byz) observe(from wire.Peer, m *wire.Message) {
	switch {
	case m.Submit != nil:
		b.remember(m.Submit.Statement)
	case m.Forward != nil:
		b.remember(m.Forward.Statement)
	case m.Proclaim != nil:
		b.rememberProclamation(m.Proclaim.Proclamation)
	case m.SessionOpen != nil && from.IsClient:
		b.sessions[from.Client] = max(b.sessions[from.Client], m.SessionOpen.Session)
	case m.Heartbeat != nil && from.IsClient:
		b.sessions[from.Client] = max(b.sessions[from.Client], m.Heartbeat.Session)
	case m.Reset != nil:
		b.resetUpTo[m.Reset.Client] = max(b.resetUpTo[m.Reset.Client], m.Reset.Session)
	}
}

// remember keeps a statement (unverified: a faulty server need not check).
func (b *Byz) remember(ss wire.SignedStatement) {
	st := decodeStatement(ss)
	if st == nil {
		return
	}
	if st.Session > b.sessions[st.Client] {
		b.sessions[st.Client] = st.Session
	}
	byClient := b.seen[st.Lock]
	if byClient == nil {
		byClient = make(map[wire.ClientID][]seenStatement)
		b.seen[st.Lock] = byClient
	}
	list := byClient[st.Client]
	ts := quorum.TimestampOf(st)
	i := sort.Search(len(list), func(i int) bool { return list[i].ts.Compare(ts) >= 0 })
	if i < len(list) && list[i].ts == ts {
		return
	}
	list = slices.Insert(list, i, seenStatement{ts: ts, st: st, ss: ss})
	if len(list) > 32 {
		list = list[len(list)-32:]
	}
	byClient[st.Client] = list
}

// rememberProclamation keeps a proclamation (unverified), the last 8 per
// lock and client.
func (b *Byz) rememberProclamation(p wire.SignedProclamation) {
	var body wire.ProclamationBody
	if crypto.UnmarshalCanonical(p.Signed.Body, &body) != nil {
		return
	}
	byClient := b.proclaimed[body.Lock]
	if byClient == nil {
		byClient = make(map[wire.ClientID][]wire.SignedProclamation)
		b.proclaimed[body.Lock] = byClient
	}
	list := append(byClient[body.Client], p)
	if len(list) > 8 {
		list = list[len(list)-8:]
	}
	byClient[body.Client] = list
}

// pastLeaders are, for lock, the newest Held this server ever received of
// every client, and every proclamation it keeps: what a faulty server can
// show as a leader that may have left long ago.
func (b *Byz) pastLeaders(lock string) ([]wire.SignedStatement, []wire.SignedProclamation) {
	var held []wire.SignedStatement
	var said []wire.SignedProclamation
	for _, c := range sortedClientIDs(b.seen[lock]) {
		list := b.seen[lock][c]
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].st.Phase == wire.PhaseHeld {
				held = append(held, list[i].ss)
				break
			}
		}
		said = append(said, b.proclaimed[lock][c]...)
	}
	return held, said
}

// older returns a random remembered statement of the same client and lock
// that is older than ss, or ss itself if there is none.
func (b *Byz) older(ss wire.SignedStatement) wire.SignedStatement {
	st := decodeStatement(ss)
	if st == nil {
		return ss
	}
	list := b.seen[st.Lock][st.Client]
	ts := quorum.TimestampOf(st)
	n := sort.Search(len(list), func(i int) bool { return list[i].ts.Compare(ts) >= 0 })
	if n == 0 {
		return ss
	}
	return list[b.Rand.IntN(n)].ss
}

// lowestTicket returns the remembered Ticket of lock with the smallest N, or nil.
func (b *Byz) lowestTicket(lock string) *wire.SignedStatement {
	var best *seenStatement
	for _, c := range sortedClientIDs(b.seen[lock]) {
		for i := range b.seen[lock][c] {
			s := &b.seen[lock][c][i]
			if s.st.Phase == wire.PhaseTicket && (best == nil || s.st.N < best.st.N) {
				best = s
			}
		}
	}
	if best == nil {
		return nil
	}
	ss := best.ss
	return &ss
}

// resignView decodes a View this server signed, lets edit change it, and signs it again.
func (b *Byz) resignView(sv wire.SignedView, edit func(*wire.ViewBody)) wire.SignedView {
	var body wire.ViewBody
	if err := crypto.Unmarshal(sv.Signed.Body, &body); err != nil {
		return sv
	}
	edit(&body)
	out, err := wire.SignView(b.Key, b.Keys.Cluster, &body)
	if err != nil {
		return sv
	}
	return out
}

// rewrite runs the honest core's output through every behaviour in order.
func (b *Byz) rewrite(now time.Time, outs []core.Outgoing) []core.Outgoing {
	b.Now = now
	for _, o := range outs {
		if o.To.IsClient && o.Msg.Update != nil {
			l := append(b.updates[o.To.Client], o.Msg.Update)
			if len(l) > 8 {
				l = l[1:]
			}
			b.updates[o.To.Client] = l
		}
	}
	for _, beh := range b.behaviors {
		var next []core.Outgoing
		for _, o := range outs {
			r := beh.Rewrite(b, o)
			if len(r) != 1 || r[0].To != o.To || r[0].Msg != o.Msg {
				b.acted(beh)
			}
			next = append(next, r...)
		}
		outs = next
	}
	return outs
}

// acted counts one act of beh: a message it changed, dropped or added, bytes
// it garbled, a delay, a wipe (Acted).
func (b *Byz) acted(beh Behavior) {
	if b.Acted == nil {
		b.Acted = map[string]int{}
	}
	b.Acted[beh.Name()]++
}

// tick collects what the behaviours send on their own.
func (b *Byz) tick(now time.Time) []core.Outgoing {
	b.Now = now
	var out []core.Outgoing
	for _, beh := range b.behaviors {
		if t, ok := beh.(Ticker); ok {
			if more := t.Tick(b); len(more) > 0 {
				b.acted(beh)
				out = append(out, more...)
			}
		}
	}
	return out
}

// garble lets byte-level behaviours tamper with an encoded message.
func (b *Byz) garble(to wire.Peer, data []byte) []byte {
	for _, beh := range b.behaviors {
		if g, ok := beh.(Garbler); ok {
			if got := g.Garble(b, to, data); string(got) != string(data) {
				b.acted(beh)
				data = got
			}
		}
	}
	return data
}

func (b *Byz) toServers(m *wire.Message) []core.Outgoing {
	var out []core.Outgoing
	for _, s := range b.servers() {
		out = append(out, core.Outgoing{To: wire.ServerPeer(s), Msg: m})
	}
	return out
}

// servers are the servers a faulty server sends its own messages to: the
// first members and every member of an epoch the chain holds, itself aside.
func (b *Byz) servers() []wire.ServerID {
	seen := map[wire.ServerID]bool{b.Self: true}
	var out []wire.ServerID
	add := func(s wire.ServerID) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for i := range b.N {
		add(wire.ServerID(i))
	}
	if b.Chain != nil {
		if ch := b.Chain(); ch != nil {
			for e := uint64(1); e <= ch.Number(); e++ {
				for _, m := range ch.Body(e).Members {
					add(m.ID)
				}
			}
		}
	}
	return out
}

// served is the epoch this faulty server's core serves (0 if unknown).
func (b *Byz) served() uint64 {
	if b.Serves == nil {
		return 0
	}
	return b.Serves()
}

func one(to wire.Peer, m *wire.Message) []core.Outgoing {
	return []core.Outgoing{{To: to, Msg: m}}
}
