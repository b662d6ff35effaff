package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Malicious clients (docs/protocol.md §6): hand-driven identities
// that sign statements of their own making and send them through the same
// simulated network as everyone else. They are not bakery.Clients: each runs
// a small script (open a session, heartbeat, Doorway → Ticket → Held →
// Exit, again) with one kind of deviation. Every one of them stops at the
// start of the quiet period and goes silent, so the checkers demand that it
// was either caught (banned or reset at every correct server by the end)
// or harmless (the correct clients' invariants all hold, and they are live
// once it stopped).

// MalClientInfo describes one malicious-client behaviour for bqsim -list.
type MalClientInfo struct {
	Name string
	Doc  string
	// Verdict: what correct servers do about it: "banned" (transferable
	// evidence, §6: the tests require every correct server to ban it),
	// "reset" (its sessions are voided by a certificate, §5), or "harmless"
	// (refused, bounded, or just slow; the checkers decide).
	Verdict string
}

var malClients = []MalClientInfo{
	{"low-ticket", "signs a Ticket with N lower than its J justifies (higher when alone: N=1 cannot go lower)", "banned"},
	{"inflate-ticket", "signs a Ticket with N = 2^62−1, far above what its J justifies", "banned"},
	{"replay-j", "sends each new attempt's Ticket with the J of its previous attempt", "banned"},
	{"short-j", "sends Tickets whose J has q−1 Views, or q Views with one duplicated", "banned"},
	{"no-doorway", "skips the Doorway: sends Held, Listen and Exit for attempts it never began", "harmless"},
	{"equivocate", "signs two different Tickets for one attempt (the same Views in two orders) and sends one to each half of the servers", "banned"},
	{"mute-in-cs", "enters the critical section and goes silent there forever (no Exit, no heartbeat)", "reset"},
	{"listen-flood", "while it waits, floods Listens naming thousands of made-up members and GetSets on fresh lock names", "harmless"},
	{"hog", "holds the lock (Held) and heartbeats until it stops at the quiet period", "harmless"},
	{"sybil", "makes a fresh identity every 200 ms that opens a session, sends a Doorway and vanishes", "reset"},
	{"idle-heartbeat", "sends a Doorway, then only heartbeats: never a Ticket (the Doorway deadline)", "reset"},
	{"partial-talk", "talks to only some servers (between 1 and q of them)", "harmless"},
	{"replay-other", "submits other clients' signed statements (taken from Views) as if they were its own", "harmless"},
	{"partial-exit", "sends each Exit to one server only, and keeps heartbeating", "harmless"},
	{"phantom-ticket", "sends a Ticket for a lock it never entered (the J of another lock)", "banned"},
	{"old-session", "heartbeats its first session for ever while it opens a newer one per attempt, sends a Doorway there and nothing more (docs/protocol.md change 18)", "reset"},
}

// MalClients lists every malicious-client behaviour, in a fixed order.
func MalClients() []MalClientInfo { return slices.Clone(malClients) }

// MalClientNames lists the malicious-client behaviours' names.
func MalClientNames() []string {
	out := make([]string, len(malClients))
	for i, m := range malClients {
		out[i] = m.Name
	}
	return out
}

func malInfo(name string) (MalClientInfo, bool) {
	for _, m := range malClients {
		if m.Name == name {
			return m, true
		}
	}
	return MalClientInfo{}, false
}

type malPhase uint8

const (
	malIdle malPhase = iota
	malDoorway
	malTicket
	malHeld
)

// malClient is one malicious client.
type malClient struct {
	w     *World
	idx   int
	kind  string
	key   *crypto.PrivateKey
	id    wire.ClientID
	rng   *rand.Rand
	alive bool
	// lie: the mode its statements claim, in a run with shared locks
	// (change 60): drawn at each Doorway, and again for one statement in
	// four after it, so an attempt may mix modes.
	lie wire.Holding
	// to: the servers it talks to.
	to []int

	sess, att, req, hbSeq uint64
	nextHB                time.Time
	phase                 malPhase
	lock                  string
	since                 time.Duration
	holdUntil             time.Duration
	nextAttempt           time.Duration
	reqDoor, reqTicket    uint64
	views                 []wire.SignedView
	viewFrom              map[wire.ServerID]bool
	members               map[wire.ServerID]bool
	n                     uint64
	prevJ                 []wire.SignedView
	// others: statements of other clients seen in Views (replay-other).
	others []wire.SignedStatement
	// flood counts GetSet lock names made up (listen-flood); sybils made.
	flood, sybils int
}

func (w *World) newMalClient(idx int, kind string, key *crypto.PrivateKey) *malClient {
	m := &malClient{
		w: w, idx: idx, kind: kind, key: key, id: wire.ClientID(key.Public.ID), alive: true,
		rng: rand.New(rand.NewPCG(w.sc.Seed, 0x6d616c+uint64(idx))),
	}
	for s := range w.sc.N {
		m.to = append(m.to, s)
	}
	if kind == "partial-talk" {
		// From one server to q: one alone is the sharpest, for no other
		// server hears of it but through announcements (§3.5).
		k := 1 + m.rng.IntN(w.q)
		m.to = sortedInts(m.rng.Perm(w.sc.N)[:k])
	}
	return m
}

func (m *malClient) node() int { return m.w.slots + len(m.w.cli) + m.idx }

func (m *malClient) name() string { return fmt.Sprintf("m%d", m.idx) }

func (m *malClient) nextReq() uint64 { m.req++; return m.req }

func (m *malClient) sendTo(s int, msg *wire.Message) { m.sendAs(s, msg, wire.ClientID{}) }

func (m *malClient) sendAs(s int, msg *wire.Message, as wire.ClientID) {
	data, err := wire.Encode(msg)
	if err != nil {
		m.w.trace("%s cannot encode %s: %v", m.name(), msg, err)
		return
	}
	m.w.sendAs(m.node(), s, data, as)
}

func (m *malClient) toAll(msg *wire.Message) {
	for _, s := range m.to {
		m.sendTo(s, msg)
	}
}

func (m *malClient) sign(st *wire.Statement) wire.SignedStatement {
	st.Client = m.id
	if st.Phase != wire.PhaseExit && m.w.sc.LockKinds != nil {
		if st.Phase == wire.PhaseDoorway || m.rng.IntN(4) == 0 {
			m.lie = m.drawLie(st.Lock)
		}
		st.Mode, st.Permits = m.lie.Mode, m.lie.Permits
	}
	ss, err := wire.SignStatement(m.key, m.w.keys.Cluster, st)
	if err != nil {
		panic(fmt.Sprintf("sim: %s signing %s: %v", m.name(), st, err))
	}
	return ss
}

// drawLie is a mode to claim on lock, whatever the lock is: exclusive,
// shared, the lock's own permits, two permits, or a thousand.
func (m *malClient) drawLie(lock string) wire.Holding {
	switch m.rng.IntN(5) {
	case 1:
		return wire.Holding{Mode: wire.ModeShared}
	case 2:
		if k := m.w.sc.kindOf(lock).Permits; k >= 2 {
			return wire.Holding{Mode: wire.ModePermits, Permits: uint32(k)}
		}
	case 3:
		return wire.Holding{Mode: wire.ModePermits, Permits: 2}
	case 4:
		return wire.Holding{Mode: wire.ModePermits, Permits: 1000}
	}
	return wire.Holding{}
}

func (m *malClient) submit(to []int, st *wire.Statement, j []wire.SignedView) {
	ss := m.sign(st)
	req := m.nextReq()
	switch st.Phase {
	case wire.PhaseDoorway:
		m.reqDoor = req
	case wire.PhaseTicket:
		m.reqTicket = req
	}
	m.w.trace("%s sends %s to %v", m.name(), st, to)
	for _, s := range to {
		m.sendTo(s, &wire.Message{Submit: &wire.Submit{Req: req, Statement: ss, J: j}})
	}
}

// start opens the first session.
func (m *malClient) start() {
	m.sess = 1
	m.att = 0
	m.toAll(&wire.Message{SessionOpen: &wire.SessionOpen{Session: m.sess, TTLMillis: uint32(m.w.sc.TTL / time.Millisecond)}})
	m.nextHB = m.w.Now().Add(m.w.sc.TTL / 3)
	m.nextAttempt = m.w.now + m.w.between(50*time.Millisecond, 500*time.Millisecond)
	m.lock = m.w.sc.Locks[0]
}

// stop ends the malicious client at the quiet period: it goes silent for good.
func (m *malClient) stop() {
	if !m.alive {
		return
	}
	m.w.trace("%s stops (goes silent)", m.name())
	m.alive = false
}

func (m *malClient) tick() {
	w := m.w
	if !m.alive {
		return
	}
	if w.now >= w.quiet {
		m.stop()
		return
	}
	now := w.Now()
	if !now.Before(m.nextHB) {
		m.hbSeq++
		hb := m.sess
		if m.kind == "old-session" {
			hb = 1 // keep the first session alive; the newer ones go silent
		}
		m.toAll(&wire.Message{Heartbeat: &wire.Heartbeat{Session: hb, Seq: m.hbSeq}})
		m.nextHB = now.Add(w.sc.TTL / 3)
	}
	switch m.kind {
	case "sybil":
		if m.sybils < 25 && w.now >= m.nextAttempt {
			m.sybil()
			m.nextAttempt = w.now + 200*time.Millisecond
		}
		return
	case "replay-other":
		if len(m.others) > 0 && m.rng.IntN(4) == 0 {
			ss := m.others[m.rng.IntN(len(m.others))]
			m.toAll(&wire.Message{Submit: &wire.Submit{Req: m.nextReq(), Statement: ss}})
		}
	case "listen-flood":
		if m.phase == malTicket || m.phase == malHeld {
			m.floodListens()
		}
	}
	switch m.phase {
	case malIdle:
		if w.now >= m.nextAttempt {
			m.begin()
		}
	case malDoorway, malTicket:
		// A stuck access: give up on it after a while and start over
		// (idle-heartbeat and old-session never give up: that is their point).
		if m.kind != "idle-heartbeat" && m.kind != "old-session" && w.now-m.since > 3*w.sc.TTL {
			m.exit()
		}
	case malHeld:
		if m.kind != "hog" && w.now >= m.holdUntil {
			m.exit()
		}
	}
}

func (m *malClient) begin() {
	w := m.w
	m.att++
	m.lock = w.sc.Locks[m.rng.IntN(len(w.sc.Locks))]
	m.since = w.now
	if m.kind == "no-doorway" {
		// Statements and Listens for an attempt it never began.
		m.submit(m.to, &wire.Statement{Lock: m.lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseHeld, N: 1 + uint64(m.rng.IntN(5))}, nil)
		m.toAll(&wire.Message{Listen: &wire.Listen{Req: m.nextReq(), Lock: m.lock, Session: m.sess, Attempt: m.att, Members: []wire.ClientID{m.id}}})
		m.submit(m.to, &wire.Statement{Lock: m.lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseExit}, nil)
		m.nextAttempt = w.now + w.between(200*time.Millisecond, time.Second)
		return
	}
	if m.kind == "old-session" {
		m.sess++ // a newer session for this attempt, never heartbeated
		m.toAll(&wire.Message{SessionOpen: &wire.SessionOpen{Session: m.sess, TTLMillis: uint32(w.sc.TTL / time.Millisecond)}})
	}
	m.phase = malDoorway
	m.views, m.viewFrom, m.members = nil, make(map[wire.ServerID]bool), make(map[wire.ServerID]bool)
	m.submit(m.to, &wire.Statement{Lock: m.lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseDoorway}, nil)
}

// receive handles what a server sent this client.
func (m *malClient) receive(from int, msg *wire.Message) {
	if !m.alive {
		return
	}
	s := wire.ServerID(from)
	switch {
	case msg.ViewReply != nil && m.phase == malDoorway && msg.ViewReply.Req == m.reqDoor:
		v, err := msg.ViewReply.View.Verify(m.w.keys)
		if err != nil || v.Server != s || m.viewFrom[s] {
			return
		}
		m.viewFrom[s] = true
		m.views = append(m.views, msg.ViewReply.View)
		for _, ss := range v.Members {
			if st := decodeStatement(ss); st != nil && st.Client != m.id && len(m.others) < 64 {
				m.others = append(m.others, ss)
			}
		}
		if len(m.views) >= m.w.q && m.kind != "idle-heartbeat" && m.kind != "old-session" {
			m.ticket()
		}
	case msg.MembersReply != nil && m.phase == malTicket && msg.MembersReply.Req == m.reqTicket:
		m.members[s] = true
		if len(m.members) >= m.w.q {
			m.held()
		}
	}
}

func (m *malClient) ticket() {
	w := m.w
	j := slices.Clone(m.views[:w.q])
	a := bakery.Attempt{Lock: m.lock, Client: m.id, Session: m.sess, Attempt: m.att}
	n, err := bakery.TicketFromJustification(j, w.keys, w.q, a, func(ss *wire.SignedStatement) (*wire.Statement, error) { return ss.Verify(w.keys.Cluster) }, nil)
	if err != nil {
		m.w.trace("%s: no ticket: %v", m.name(), err)
		m.exit()
		return
	}
	lock, sendJ := m.lock, j
	switch m.kind {
	case "low-ticket":
		if n > 1 {
			n--
		} else {
			n++
		}
	case "inflate-ticket":
		n = wire.TicketCap - 1
	case "replay-j":
		if m.prevJ != nil {
			sendJ = m.prevJ
		}
	case "short-j":
		if m.att%2 == 1 {
			sendJ = j[:w.q-1]
		} else {
			sendJ = append(slices.Clone(j[:w.q-1]), j[0])
		}
	case "phantom-ticket":
		lock = m.lock + "~phantom"
	}
	m.prevJ = j
	m.n = n
	m.phase = malTicket
	m.since = w.now
	st := &wire.Statement{Lock: lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseTicket, N: n}
	if m.kind == "equivocate" {
		rev := slices.Clone(j)
		slices.Reverse(rev)
		half := len(m.to) / 2
		h1, h2 := wire.JustificationHash(j), wire.JustificationHash(rev)
		a, b := *st, *st
		a.JHash, b.JHash = &h1, &h2
		m.submit(m.to[:half], &a, j)
		m.submit(m.to[half:], &b, rev)
		return
	}
	h := wire.JustificationHash(sendJ)
	st.JHash = &h
	m.submit(m.to, st, sendJ)
}

func (m *malClient) held() {
	w := m.w
	m.phase = malHeld
	m.submit(m.to, &wire.Statement{Lock: m.lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseHeld, N: m.n}, nil)
	m.holdUntil = w.now + w.between(w.sc.HoldMin, w.sc.HoldMax)
	if m.kind == "mute-in-cs" {
		m.w.trace("%s goes silent inside the critical section", m.name())
		m.alive = false
	}
}

func (m *malClient) exit() {
	w := m.w
	to := m.to
	if m.kind == "partial-exit" {
		to = []int{m.to[m.rng.IntN(len(m.to))]}
	}
	m.submit(to, &wire.Statement{Lock: m.lock, Session: m.sess, Attempt: m.att, Phase: wire.PhaseExit}, nil)
	m.phase = malIdle
	m.nextAttempt = w.now + w.between(w.sc.ThinkMin, w.sc.ThinkMax)
}

func (m *malClient) floodListens() {
	many := 100
	if m.rng.IntN(4) == 0 {
		many = 5000 // above MaxListenMembers
	}
	ids := make([]wire.ClientID, many)
	for i := range ids {
		ids[i][0], ids[i][1], ids[i][2] = byte(i), byte(i>>8), byte(m.rng.IntN(256))
	}
	m.toAll(&wire.Message{Listen: &wire.Listen{Req: m.nextReq(), Lock: m.lock, Session: m.sess, Attempt: m.att, Members: ids}})
	for range 60 {
		m.flood++
		m.toAll(&wire.Message{GetSet: &wire.GetSet{Req: m.nextReq(), Lock: fmt.Sprintf("flood-%d", m.flood)}})
	}
}

// sybil makes one fresh identity: a session and a Doorway, then nothing.
func (m *malClient) sybil() {
	m.sybils++
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(m.rng.Uint32())
	}
	k, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, seed)
	if err != nil {
		return
	}
	id := wire.ClientID(k.Public.ID)
	st := &wire.Statement{Lock: m.w.sc.Locks[0], Client: id, Session: 1, Attempt: 1, Phase: wire.PhaseDoorway}
	ss, err := wire.SignStatement(k, m.w.keys.Cluster, st)
	if err != nil {
		return
	}
	m.w.trace("%s makes sybil %s", m.name(), id)
	for _, s := range m.to {
		m.sendAs(s, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: uint32(m.w.sc.TTL / time.Millisecond)}}, id)
		m.sendAs(s, &wire.Message{Submit: &wire.Submit{Req: 1, Statement: ss}}, id)
	}
}

// CheckMalicious reports an unknown malicious-client behaviour name.
func CheckMalicious(names []string) error {
	for _, n := range names {
		if _, ok := malInfo(n); !ok {
			return fmt.Errorf("sim: no malicious-client behaviour %q (have %v)", n, MalClientNames())
		}
	}
	return nil
}
