package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mutant weakens one rule of the protocol (docs/protocol.md, docs/protocol.md)
// by one: one quorum one server smaller, one check dropped, one bound moved
// by one. From must occur exactly once in File (CheckCatalogue, and the
// test catalogue_test.go, keep the catalogue in step with the code).
type Mutant struct {
	Name string // short, unique
	Rule string // the section of docs/protocol.md (or docs/protocol.md change) and the rule, in one line
	File string // relative to the repository root
	From string // the original snippet
	To   string // its replacement
}

// ownTests are, for a mutant of a package outside unitPackages (whose
// tests are too slow to run for every mutant), the -run pattern of that
// package's tests that run against it, by mutant name.
var ownTests = map[string]string{
	"address-rate-ignored":         "^TestQUICAcceptRatePerAddress$",
	"connection-refusal-uncounted": "^TestQUICAcceptRatePerAddress$",
	"proclaim-not-resent":          "^TestElectionValueSurvivesRestarts$",
	"observer-bound-to-client":     "^TestQUICObserver",
	"observers-unbounded":          "^TestQUICObserver",
	"observers-survive-revocation": "^TestQUICObserver",
	"names-from-one-server":        "^TestStatusNamesNeedFPlusOne$",
}

// Catalogue is every mutant, grouped by the kind of rule it weakens.
var Catalogue = []Mutant{
	// Quorum sizes: q → q−1 at each place a quorum is counted.
	{"access-q-1", "§3: an access decides on the answers of q distinct servers", "quorum/access.go",
		"return len(a.replies) >= a.q }", "return len(a.replies) >= a.q-1 }"},
	{"read-q-1", "§2: a register read takes the highest valid statement of q servers", "bakery/read.go",
		"reads: quorum.NewAccess[quorum.RegisterValue](c.q)", "reads: quorum.NewAccess[quorum.RegisterValue](c.q - 1)"},
	{"getset-q-1", "§3, Algorithm 1: getSet returns a set reported by q distinct servers", "bakery/read.go",
		"set: activeset.NewSetReader(c.q)", "set: activeset.NewSetReader(c.q - 1)"},
	{"setreader-q-1", "§3, Algorithm 1: getSet returns a set reported by q distinct servers", "activeset/reader.go",
		"if count[k] >= r.q {", "if count[k] >= r.q-1 {"},
	{"views-q-1", "§3.1: J is the Views of q distinct servers", "bakery/getticket.go",
		"a.views = quorum.NewAccess[wire.SignedView](c.q)", "a.views = quorum.NewAccess[wire.SignedView](c.q - 1)"},
	{"j-size-q-1", "§3.2: a server accepts J only with exactly q Views", "bakery/ticket.go",
		"if len(j) != q {", "if len(j) < q-1 {"},
	{"ticket-acks-q-1", "§3.2: SET-TICKET completes with the answers of q distinct servers", "bakery/getticket.go",
		"a.members = quorum.NewAccess[[]memberClaim](c.q)", "a.members = quorum.NewAccess[[]memberClaim](c.q - 1)"},
	{"union-q-1", "§3.2: S' is the union of the member sets of q answers", "bakery/setticket.go",
		"a.others = c.membersOf(a.lock, a.members.First())", "a.others = c.membersOf(a.lock, a.members.First()[1:])"},
	{"listen-heard-q-1", "§3.3: a client decides only once q servers reported since Listen", "bakery/listen.go",
		"if len(a.others) > 0 && len(a.heard) < c.q {", "if len(a.others) > 0 && len(a.heard) < c.q-1 {"},
	{"absence-q-1", "§3.3 absence rule: x is passable once q distinct servers report it absent", "bakery/listen.go",
		"if len(r.absentFrom) >= c.q {", "if len(r.absentFrom) >= c.q-1 {"},
	{"lease-q-1", "§5: the lease guarantee needs fresh \"lease ok\" acks of q servers", "quorum/lease.go",
		"q: q, valid: ttl - margin, session: session,", "q: q - 1, valid: ttl - margin, session: session,"},
	{"cert-quorum-q-1", "§5: a reset certificate needs Suspect votes of q distinct servers (forming and applying)", "detector/votes.go",
		"return m.cfg.Quorum\n}", "return m.cfg.Quorum - 1\n}"},
	{"apply-cert-q-1", "§5: a server applies a certificate only with votes of q distinct servers", "detector/votes.go",
		"cert.Verify(m.cfg.Keys, m.certQuorum()); err != nil {", "cert.Verify(m.cfg.Keys, m.certQuorum()-1); err != nil {"},
	{"wire-cert-q-1", "§5: a certificate verifies only with votes of q distinct servers", "wire/verify.go",
		"if len(seen) < quorum {", "if len(seen) < quorum-1 {"},
	{"listen-cert-q-1", "§3.3, §5: a listener counts a reset only with a certificate of q votes", "bakery/listen.go",
		"if cert.Verify(c.cfg.Keys, c.q) == nil {", "if cert.Verify(c.cfg.Keys, c.q-1) == nil {"},
	{"read-cert-q-1", "§2, §5: a read voids a statement only with a certificate of q votes", "bakery/read.go",
		"rr.Reset.Verify(c.cfg.Keys, c.q) == nil {", "rr.Reset.Verify(c.cfg.Keys, c.q-1) == nil {"},

	// Distinct signers.
	{"access-duplicate-counts", "§3: only the first verified reply of each server counts", "quorum/access.go",
		"if _, ok := a.replies[s]; ok {\n\t\treturn a.Done()", "if _, ok := a.replies[s]; ok {\n\t\ta.q--\n\t\treturn a.Done()"},
	{"j-duplicate-server", "§3.2: J holds Views of q distinct servers", "bakery/ticket.go",
		"if seen[v.Server] {", "if false && seen[v.Server] {"},
	{"cert-counts-votes", "§5: a certificate counts distinct servers, not votes", "wire/verify.go",
		"if seen[body.Server] {\n\t\t\treturn invalid(\"certificate holds two votes by %s\", body.Server)\n\t\t}\n\t\tseen[body.Server] = true",
		"seen[ServerID(i)] = true"},

	// Keys, signatures and the cluster binding.
	{"stmt-signer-not-client", "§1, §2: only c's key signs c's statements", "wire/verify.go",
		"if ClientID(pub.ID) != st.Client {", "if false && ClientID(pub.ID) != st.Client {"},
	{"stmt-signature-unchecked", "§1, §2: a statement counts only with its client's signature", "wire/verify.go",
		"if checkSig && !pub.Verify(crypto.DomainStatement", "if false && checkSig && !pub.Verify(crypto.DomainStatement"},
	{"stmt-body-not-canonical", "§1: a signed statement has one encoding (the hand-written codec refuses any other)", "wire/statement_codec.go",
		"if !bytes.Equal(appendStatement(", "if false && !bytes.Equal(appendStatement("},
	{"key-scheme-not-utf8", "§8: the hand-written key decoder is never looser than the library (a scheme is UTF-8)", "crypto/codec_hand.go",
		"if !utf8.Valid(scheme) {", "if false && !utf8.Valid(scheme) {"},
	{"view-signer-not-server", "§3.1: a View is signed by the server it names", "wire/verify.go",
		"if body.Server != v.Server {", "if false && body.Server != v.Server {"},
	{"vote-signer-not-server", "§5: a Suspect vote is signed by the server it names", "wire/verify.go",
		"if body.Server != s.Server {", "if false && body.Server != s.Server {"},
	{"stmt-cluster-unchecked", "§1 cluster binding: a statement of another cluster is refused", "wire/verify.go",
		`checkCluster("statement", st.Cluster, cluster)`, `checkCluster("statement", st.Cluster, st.Cluster)`},
	{"view-cluster-unchecked", "§1 cluster binding: a View of another cluster is refused", "wire/verify.go",
		`checkCluster("view", body.Cluster, keys.Cluster)`, `checkCluster("view", body.Cluster, body.Cluster)`},
	{"vote-cluster-unchecked", "§1 cluster binding: a vote (so a certificate) of another cluster is refused", "wire/verify.go",
		`checkCluster("vote", body.Cluster, keys.Cluster)`, `checkCluster("vote", body.Cluster, body.Cluster)`},
	{"client-view-of-other-server", "§3.1: a client counts a View for the server that signed it", "bakery/getticket.go",
		"if err == nil && (v.Server != s || v.Lock", "if err == nil && (v.Lock"},
	{"cert-any-session", "§5: every vote of a certificate is on its (client, session)", "wire/verify.go",
		"if body.Client != r.Client || body.Session != r.Session {", "if body.Client != r.Client {"},
	{"submit-others-statements", "§2: a client may submit only its own statements", "server/core/clients.go",
		"if st.Client != c {", "if false && st.Client != c {"},

	// Leases and deadlines.
	{"lease-no-margin", "§5: an ack counts for TTL·(1−ε) after its heartbeat was sent, not TTL", "quorum/lease.go",
		"q: q, valid: ttl - margin, session: session,", "q: q, valid: ttl, session: session,"},
	{"client-default-margin", "§5: the client's default drift margin ε is TTL/10", "bakery/client.go",
		"cfg.Margin = cfg.TTL / 10", "cfg.Margin = 1"},
	{"lease-holds-at-expiry", "§5: the guarantee lapses at the instant TTL·(1−ε) after the send", "quorum/lease.go",
		"return !u.IsZero() && now.Before(u)", "return !u.IsZero() && !now.After(u)"},
	{"lease-suspecter-counts", "§5: a server that suspected the session never counts toward the lease again", "quorum/lease.go",
		"if !known || l.suspected[s] {", "if !known {"},
	{"enter-without-lease-now", "§3.3, §5: a client enters only if its lease guarantee holds at that instant", "bakery/listen.go",
		"if !c.lease.Holds(now) {", "if !c.leaseHeld {"},
	{"doorway-deadline-late", "§5 Doorway deadline: a client in its Doorway for the deadline is refused", "detector/muteness.go",
		"if now.Sub(d.since) < m.cfg.DoorwayDeadline {", "if now.Sub(d.since) <= m.cfg.DoorwayDeadline {"},
	{"doorway-vote-at-once", "§5, change 4: the Doorway deadline refuses at once but votes only when the lease runs out", "detector/muteness.go",
		"l.refused, l.refusedWhy = true, why\n", "l.refused, l.refusedWhy = true, why\n\t\tl.until = now\n"},
	{"refused-session-renewed", "§5, change 4: a session refused for its Doorway is no longer renewed", "detector/muteness.go",
		"if l.suspected || l.refused {", "if l.suspected {"},
	{"core-no-doorway-deadline", "§5 Doorway deadline: a server times every Doorway it accepts", "server/core/core.go",
		"k.mute.DoorwayStarted(c, lock.Name, st.Session, now)", "_ = now"},

	// Resets and void statements.
	{"void-off-by-one", "§2, §5: a certificate on sess voids every statement with session ≤ sess", "quorum/register.go",
		"s.Session <= resetUpTo", "s.Session < resetUpTo"},
	{"read-ignores-void", "§2: a read returns the highest statement that no answer shows void", "quorum/register.go",
		"if s == nil || Void(s, resetUpTo) {", "if s == nil {"},
	{"server-void-off-by-one", "§5: a certificate on sess removes the client's statements of session ≤ sess", "activeset/lock.go",
		"if e == nil || e.St.Session > upTo {", "if e == nil || e.St.Session >= upTo {"},
	{"collect-too-much", "change 22: a certificate on sess collects values of session ≤ sess, never of a newer one", "activeset/lock.go",
		"if e == nil || e.St.Session > upTo {", "if e == nil || e.St.Session > upTo+1 {"},
	{"collect-never", "change 22: a certificate collects the values it voids, so the lock bound counts what is live", "server/core/core.go",
		"\tk.collect(cert.Client, cert.Session, e)", "\t_ = cert"},
	{"pending-vote-not-resent", "change 22: a server resends its votes that no certificate settled, once per TTL", "server/core/core.go",
		"\tk.resendOwnVotes(now, &e)\n", "\n"},
	{"restart-loads-collected", "change 22: a restart neither loads nor keeps a value a certificate ended", "server/core/persist.go",
		"if st.Session <= k.mute.ResetUpTo(st.Client) {", "if false {"},
	{"resync-drops-collected-certs", "change 22: resync still sends the certificates of clients it collected", "server/core/peers.go",
		"\t\t\tclients = append(clients, c)\n", "\t\t\t_ = c\n"},
	{"reset-session-renewed", "§5: a server refuses a session that was reset (heartbeats, opens)", "detector/muteness.go",
		"if sess <= cs.resetUpTo {\n\t\treturn ErrSessionReset", "if sess < cs.resetUpTo {\n\t\treturn ErrSessionReset"},
	{"reset-session-observed", "§5: a server starts no lease on a session that was reset (a late statement of it)", "detector/muteness.go",
		"if sess <= cs.resetUpTo {\n\t\treturn nil, ErrSessionReset", "if sess < cs.resetUpTo {\n\t\treturn nil, ErrSessionReset"},
	{"core-accepts-reset-session", "§5: a server refuses statements of a reset session", "server/core/core.go",
		"if st.Session <= k.mute.ResetUpTo(c) {", "if st.Session < k.mute.ResetUpTo(c) {"},

	// Admission, permissions and revocation (change 23).
	{"revoked-lease-renewed", "change 23: no lease of a revoked client is renewed", "detector/muteness.go",
		"if cs.revoked {\n\t\treturn ErrRevoked", "if false && cs.revoked {\n\t\treturn ErrRevoked"},
	{"revoked-new-lease-live", "change 23: a session of a revoked client first seen afterwards is refused from the start", "detector/muteness.go",
		"until: now.Add(ttl), refused: cs.revoked}", "until: now.Add(ttl), refused: false}"},
	{"revoked-old-lease-live", "change 23: a revocation refuses the client's existing leases", "detector/muteness.go",
		"cs.revoked = true\n\tfor _, l := range cs.leases {\n\t\tl.refused = true", "cs.revoked = true\n\tfor _, l := range cs.leases {\n\t\tl.refused = l.refused"},
	{"permission-ignored", "change 23: a lock name outside the certificate's patterns is refused", "server/core/admission.go",
		"if g.Allows(lock) {", "if true || g.Allows(lock) {"},
	{"revocation-not-persisted", "change 23: a revocation is durable before it is acknowledged", "server/core/admission.go",
		"Value: mustMarshal(signed)})", "Value: mustMarshal(signed), Delete: true})"},
	{"revocation-not-passed-on", "change 23: a server passes a new revocation on to every other server", "server/core/admission.go",
		"k.toServers(&wire.Message{Revoke: &wire.Revoke{Revocation: signed}}, e)", "_ = signed"},
	{"revocation-not-resynced", "change 23: a server hands its revocations to a peer that reconnects", "server/core/peers.go",
		"k.sendRevocations(s, e)", "_ = s"},
	{"revocation-any-signer", "change 23: only the client CA can revoke", "wire/admission.go",
		"if err := crypto.Open(ca, crypto.DomainRevocation, s, &r); err != nil {", "if err := crypto.UnmarshalCanonical(s.Body, &r); err != nil {"},

	// Max-hold (change 24).
	{"maxhold-twice", "change 24: past its max-hold a holder's lease is refused", "detector/maxhold.go",
		"if now.Sub(h.since) < h.limit {", "if now.Sub(h.since) < 2*h.limit {"},
	{"refusal-extends-lease", "§5, change 24: a refused lease keeps the end its last renewal gave it", "detector/muteness.go",
		"l.refused, l.refusedWhy = true, why\n", "l.refused, l.refusedWhy = true, why\n\t\tl.until = now.Add(l.ttl)\n"},
	{"maxhold-held-not-timed", "change 24: a Held starts the hold clock", "server/core/maxhold.go",
		"k.mute.HoldStarted(st.Client, st.Lock, st.Session, now, k.maxHoldOf(st.Client))", "_ = now"},
	{"maxhold-no-least-start", "change 24: a Ticket least for HeldDeadline with no Held starts the hold clock", "server/core/maxhold.go",
		"if !t.started && now.Sub(t.since) >= k.cfg.DoorwayDeadline {", "if false && !t.started && now.Sub(t.since) >= k.cfg.DoorwayDeadline {"},
	{"maxhold-certificate-ignored", "change 24: a certificate's max-hold wins over the default", "server/core/maxhold.go",
		"if g := k.grants[c]; g != nil && g.MaxHoldMillis > 0 {", "if g := k.grants[c]; false && g != nil && g.MaxHoldMillis > 0 {"},
	{"maxhold-exit-keeps-clock", "change 24: an Exit stops the hold clock", "server/core/maxhold.go",
		"} else {\n\t\tk.mute.HoldEnded(st.Client, st.Lock)", "} else if false {\n\t\tk.mute.HoldEnded(st.Client, st.Lock)"},

	{"maxhold-client-smallest", "change 24: a client counts with the (f+1)-th smallest max-hold reported", "bakery/maxhold.go",
		"return vals[c.cfg.F]", "return vals[0]"},
	{"maxhold-client-no-margin", "change 24: a client gives a holding up a margin before its max-hold", "bakery/maxhold.go",
		"return c.cfg.Margin + mh/20", "return 0"},
	{"maxhold-fits-third", "change 24: a Lock whose holding would be more than half margin is refused", "bakery/maxhold.go",
		"mh-c.maxHoldMargin(mh) >= mh/2 {", "mh-c.maxHoldMargin(mh) >= mh/3 {"},

	// Observer connections (change 32).
	{"observer-may-submit", "change 32: an observer connection only reads", "server/core/admission.go",
		"if m.Status == nil && m.GetSet == nil && m.Read == nil {", "if m.Status == nil && m.GetSet == nil && m.Read == nil && m.Submit == nil {"},
	{"observer-outlives-revocation", "change 32: an observer of a revoked client is refused everything", "server/core/admission.go",
		"if _, revoked := k.revoked[parent]; revoked {", "if _, revoked := k.revoked[parent]; false && revoked {"},
	{"proclaim-not-pushed", "change 32: a new proclamation is pushed to the lock's GetSet subscribers", "server/core/proclaim.go",
		"k.sendPushes(lock.ChangedNotListens(c, k.mute.Certificate), e)", "_ = lock"},
	{"observer-bound-to-client", "change 32: an observer connection is bound to an id of its own", "transport/quic_conn.go",
		"id, observes = wire.ObserverID(key, nonce), &key", "observes = &key"},
	{"observers-unbounded", "change 32: a client has at most MaxObserversPerClient observers at a server", "transport/quic_conn.go",
		"for len(os) > n.lim.MaxObserversPerClient {", "for len(os) > n.lim.MaxObserversPerClient+1 {"},
	{"observers-survive-revocation", "change 32: a revoked client's observers are closed with it", "transport/quic_conn.go",
		"cs := slices.Concat(n.clients[c], n.observers[c])", "cs := slices.Clone(n.clients[c])"},
	{"names-from-one-server", "change 32: a member's name is shown when f+1 servers report it", "status.go",
		"if n > f {\n\t\t\tout[cn.Client] = cn.Name", "if n >= f {\n\t\t\tout[cn.Client] = cn.Name"},

	// Limits (change 25).
	{"client-rate-ignored", "change 25: one identity's requests are a token bucket", "server/core/limits.go",
		"if m.SessionOpen != nil || m.Heartbeat != nil || m.SessionClose != nil {\n\t\treturn nil", "if true {\n\t\treturn nil"},
	{"rate-refilled-on-reconnect", "change 25: a reconnect does not refill an identity's buckets", "server/core/limits.go",
		"} else if r := k.rates[c]; r != nil {\n\t\tr.connected = false", "} else if r := k.rates[c]; r != nil {\n\t\tdelete(k.rates, c)"},
	{"new-names-unlimited", "change 25: new lock names of one identity are a token bucket", "server/core/limits.go",
		"if _, ok := k.clientLocks[c][name]; !ok && !exit {\n\t\tif err := wire.CheckLockName(name)", "if false {\n\t\tif err := wire.CheckLockName(name)"},
	{"address-rate-ignored", "change 25: handshakes per source address are a token bucket", "transport/quic_conn.go",
		"case !n.allowAddress(info.RemoteAddr, now):", "case false && !n.allowAddress(info.RemoteAddr, now):"},
	{"member-cap-plus-one", "change 25: a lock takes no new member past the cap that fits in one frame", "server/core/core.go",
		"!lock.IsMember(c) && lock.MemberCount() >= k.memberCap {", "!lock.IsMember(c) && lock.MemberCount() > k.memberCap {"},
	{"vote-only-unbounded", "change 25: the clients known only from other servers' votes are bounded", "detector/voteonly.go",
		"for len(v.set) >= m.cfg.MaxVoteOnly && len(v.queue) > 0 {", "for false && len(v.set) >= m.cfg.MaxVoteOnly && len(v.queue) > 0 {"},
	{"bans-unbounded", "change 25: past MaxBans only clients known here are banned on another server's evidence", "server/core/peers.go",
		"(len(k.banned) < k.cfg.MaxBans || k.knows(c))", "(true || k.knows(c))"},
	{"live-not-marked", "§5, change 25: every client with a lease is one Tick looks at", "detector/muteness.go",
		"m.live[c] = struct{}{}\n\tcs := m.clients[c]", "cs := m.clients[c]"},
	{"state-bytes-unbounded", "change 25: past MaxStateBytes no statement adds a register", "server/core/statebytes.go",
		"if lock.Highest(c) != nil || k.stateBytes+size+jSize(j) <= k.cfg.MaxStateBytes {", "if true || lock.Highest(c) != nil || k.stateBytes+size+jSize(j) <= k.cfg.MaxStateBytes {"},
	{"settled-forgets-reset", "change 26: a compacted client's ended sessions stay refused", "detector/votes.go",
		"return m.settledUpTo[c]\n}", "return 0\n}"},
	{"compact-before-retention", "change 26: a certificate is kept for CertRetention before it is compacted", "detector/settled.go",
		"now.Sub(m.settling[0].since) >= m.cfg.CertRetention {", "now.Sub(m.settling[0].since) >= 0 {"},
	{"rate-refusal-not-retried", "change 25: a request refused by a rate is sent again after its RetryAfter", "bakery/retry.go",
		"if er.Code != wire.ErrCodeLimit || er.Limit == nil", "if true || er.Code != wire.ErrCodeLimit || er.Limit == nil"},
	{"retry-per-refusal", "change 25: at most one retry per server and request, however often it refuses", "bakery/retry.go",
		"if r.s == s && r.req == er.Req {", "if r.s != r.s {"},
	{"exit-takes-name-token", "change 25: an Exit is never refused by a limit", "server/core/limits.go",
		"if _, ok := k.clientLocks[c][name]; !ok && !exit {\n", "if _, ok := k.clientLocks[c][name]; !ok {\n"},
	{"connection-refusal-uncounted", "change 25: the server counts every refusal by limit, connections too", "transport/quic_conn.go",
		"if n.onLimit != nil {\n\t\t\t\tn.onLimit(limit)", "if false {\n\t\t\t\tn.onLimit(limit)"},
	{"pending-votes-evict-known", "§5, change 25: votes on a session this server knows are not pushed out by a faulty server's on others", "detector/votes.go",
		"if m.known(cs, sess) || slices.Contains(cs.deferred, sess) {", "if true || m.known(cs, sess) || slices.Contains(cs.deferred, sess) {"},
	{"max-locks-plus-one", "change 25: the locks in use at a server are bounded", "server/core/collect.go",
		"len(k.lockRefs) >= k.cfg.MaxLocks {", "len(k.lockRefs) > k.cfg.MaxLocks {"},

	// Tie-breaks and the LISTEN decision.
	{"tie-equal-n-passable", "§3.3, change 8: equal N is broken by (H(N‖id), id), never both passable", "bakery/listen.go",
		"return Token{N: a.n, Client: c.id}.Less(Token{N: st.N, Client: x})", "return a.n <= st.N"},
	{"tiebreak-by-id-only", "change 8: ties between equal tickets go by H(N‖ClientID) first", "bakery/token.go",
		"if a, b := t.TieBreak(), o.TieBreak(); a != b {", "if a, b := t.TieBreak(), o.TieBreak(); false && a != b {"},
	{"doorway-passable", "§3.3: a member in its Doorway (choosing) makes the client wait", "bakery/listen.go",
		"if st.Phase == wire.PhaseDoorway {\n\t\treturn false", "if st.Phase == wire.PhaseDoorway {\n\t\treturn true"},
	{"passed-member-forgotten", "§3.3, change 14: a member a waiting client has passed stays passed", "bakery/listen.go",
		"a.reports[x].passed = true", "_ = x"},
	{"settled-without-statement", "change 15: no statement settles nothing (the absence rule needs q servers)", "server/core/clients.go",
		"case en == nil:\n\t\t\treturn false", "case en == nil:\n\t\t\treturn true"},
	{"settled-equal-n", "change 15, §3.3: a member is settled only by a ticket after the listener's (tie-break)", "server/core/clients.go",
		"return mine.Less(bakery.Token{N: en.St.N, Client: x})", "return mine.N <= en.St.N"},

	// The ticket rule.
	{"ticket-without-hw", "§3.1: N = 1 + max over the member statements and the hw statements of J", "bakery/ticket.go",
		"if v.HW != nil {", "if false && v.HW != nil {"},
	{"ticket-without-members", "§3.1: N = 1 + max over the member statements and the hw statements of J", "bakery/ticket.go",
		"consider(&v.Members[k])", "_ = k"},
	{"ticket-max-not-plus-one", "§3.1: N = 1 + max(...), not max", "bakery/ticket.go",
		"n := maxN + 1", "n := maxN"},
	{"ticket-min-not-max", "§3.2: the statement that attains the max decides N", "bakery/ticket.go",
		"return cands[x].n > cands[y].n", "return cands[x].n < cands[y].n"},
	{"ticket-cap-off-by-one", "§8: a ticket ≥ 2^62 is refused", "bakery/ticket.go",
		"if n >= wire.TicketCap {", "if n > wire.TicketCap {"},
	{"stmt-cap-off-by-one", "§8: a statement with N ≥ 2^62 is refused", "wire/verify.go",
		"if st.N >= TicketCap {", "if st.N > TicketCap {"},
	{"ticket-accepts-larger-n", "§3.2: a server accepts a Ticket only with N exactly 1 + max(J)", "bakery/ticket.go",
		"if st.N != n && !skipTicketRule()", "if st.N < n && !skipTicketRule()"},
	{"ticket-jhash-unchecked", "§2, §3.2: a Ticket's signature covers H(J) of the J it is shown with", "bakery/ticket.go",
		"if h := wire.JustificationHash(j); h != *st.JHash {", "if h := wire.JustificationHash(j); false && h != *st.JHash {"},
	{"j-of-other-attempt", "§3.2: every View of J is for this (c, sess, att): an old J is never replayed", "bakery/ticket.go",
		"v.ForSession != a.Session || v.ForAttempt != a.Attempt {", "v.ForSession != a.Session {"},
	{"hw-last-not-highest", "§3.1, §7: hw is the highest Ticket ever accepted for the lock", "activeset/lock.go",
		"(l.hw == nil || e.St.N > l.hw.St.N)", "(l.hw == nil || e.St.N > 0)"},
	{"view-without-hw", "§3.1, §7: a View carries the lock's hw", "server/core/core.go",
		"hw != nil && !dropHighWater() {", "hw != nil && false {"},
	{"view-lowest-member", "change 16: a View carries the highest numbered member", "activeset/lock.go",
		"if best == nil || e.St.N > best.St.N", "if best == nil || e.St.N < best.St.N"},
	{"held-of-other-n", "§6: a Held follows this server's Ticket of the same attempt and N", "server/core/core.go",
		"|| prev.St.Attempt != st.Attempt || prev.St.N != st.N {", "|| prev.St.Attempt != st.Attempt {"},

	// Each J accepted once, attempts monotone, the register order.
	{"register-rolls-back", "§2: a register keeps the statement with the highest timestamp", "activeset/lock.go",
		"case -1:\n\t\t\treturn Stale, prev", "case -2:\n\t\t\treturn Stale, prev"},
	{"client-attempt-reused", "§2: a client's attempt counter strictly increases", "bakery/getticket.go",
		"c.nextAtt++", "_ = c.nextAtt"},
	{"equivocation-not-banned", "§2, §6: two statements with one timestamp ban their client", "server/core/core.go",
		"k.ban(c, &wire.Evidence{Kind: wire.EvidenceEquivocation, A: ss, B: &other}, e)", "_ = other"},
	{"ban-without-jhash", "change 2: an InvalidTicket verdict needs J to match the Ticket's signed H(J)", "server/core/core.go",
		"if errors.Is(err, bakery.ErrBadJustification) && wire.JustificationHash(j) == *st.JHash {", "if errors.Is(err, bakery.ErrBadJustification) {"},
	{"evidence-without-jhash", "change 2: InvalidTicket evidence needs J to match the Ticket's signed H(J)", "detector/evidence.go",
		"if wire.JustificationHash(ev.J) != *a.JHash {", "if false && wire.JustificationHash(ev.J) != *a.JHash {"},
	{"evidence-any-timestamp", "§2, §6: equivocation is two statements with the same timestamp", "detector/evidence.go",
		"|| quorum.TimestampOf(a) != quorum.TimestampOf(b) {", "|| false && quorum.TimestampOf(a) != quorum.TimestampOf(b) {"},

	// Persistence and replay.
	{"statement-lazy", "§9, changes 13, 29: only a Held or an Exit may wait for a later commit; other statements are durable before their ack", "server/core/core.go",
		"lazy := st.Phase == wire.PhaseHeld || st.Phase == wire.PhaseExit", "lazy := true"},
	{"exit-not-resent", "change 29: a client resends the Exit of its last attempt on each lock when a connection comes back", "bakery/client.go",
		"send(&wire.Message{Submit: &wire.Submit{Req: c.req(), Statement: exit}})", "_ = exit"},
	{"hw-not-persisted", "§9: hw per lock is persisted", "server/core/core.go",
		"if lock.HW() != hwBefore {", "if lock.HW() != hwBefore && st.Phase == wire.PhaseHeld {"},
	{"hw-not-restored", "§9: a restarted server restores hw", "server/core/persist.go",
		"k.restoredLock(string(key)).RestoreHW(en)", "_ = en"},
	{"vote-not-persisted", "§9: a server's own votes are persisted", "server/core/core.go",
		"e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(body.Client, body.Session), Value: mustMarshal(v)})", "_ = body"},
	{"votes-not-restored", "§9: a restarted server keeps refusing the sessions it voted on", "server/core/persist.go",
		"return k.mute.RestoreVote(vote)", "return nil"},
	{"cert-not-persisted", "§9: reset certificates are persisted", "server/core/core.go",
		"e.Persist = append(e.Persist, Record{Bucket: bucketCert, Key: cert.Client[:], Value: mustMarshal(cert)},", "e.Persist = append(e.Persist,"},
	{"cert-not-restored", "§9: a restarted server's statements stay void under its certificates", "server/core/persist.go",
		"if _, err := k.mute.ApplyCertificate(&cert); err != nil {", "if err := cert.Verify(k.cfg.Keys, k.q); err != nil {"},
	{"report-overtakes-ack", "change 12: a report leaves early only if nothing to the same peer waits", "server/core/pipeline.go",
		"if o.Reports() && p.waiting[o.To] == 0 {", "if o.Reports() {"},
	{"ack-counts-as-report", "§9, change 12: an Ack waits for its batch's commit", "server/core/effects.go",
		"return m.Update != nil || m.Forward != nil", "return m.Ack != nil || m.Update != nil || m.Forward != nil"},
	{"wal-no-crc", "§9: WAL replay takes only records whose CRC matches", "server/store/wal.go",
		"if binary.LittleEndian.Uint32(rec[4:]) != recordCRC(rec) {", "if false && binary.LittleEndian.Uint32(rec[4:]) != recordCRC(rec) {"},
	{"wal-no-seq-chain", "§9: WAL replay follows seq previous+1", "server/store/wal.go",
		"pass != prev.pass || seq != prev.seq+1", "pass != prev.pass"},
	{"wal-no-pass-chain", "§9: WAL replay stays in one pass", "server/store/wal.go",
		"pass != prev.pass || seq != prev.seq+1", "seq != prev.seq+1"},
	{"wal-replay-skips-one", "§9: WAL replay applies every record after the applied one", "server/store/wal.go",
		"if r.seq > applied {", "if r.seq > applied+1 {"},
	{"wal-replayed-into-new-db", "§9: a WAL without its database is not replayed", "server/store/wal.go",
		"if dbCreated {", "if false && dbCreated {"},
	{"wal-wrap-without-checkpoint", "§9: the WAL is overwritten only after a checkpoint applied it", "server/store/commit.go",
		"if err := s.checkpoint(); err != nil {\n\t\treturn fmt.Errorf(\"store: WAL full", "if err := error(nil); err != nil {\n\t\treturn fmt.Errorf(\"store: WAL full"},

	// Numbers are never reused (§2).
	{"session-counter-not-persisted", "§2: a session number is on disk before it is used", "certs/sessions.go",
		"if err := s.persist(next); err != nil {\n\t\treturn 0, err\n\t}", "_ = s.persist"},
	{"session-counter-shared-lock", "§2, §5: one identity, one process: the counter file is locked exclusively", "certs/flock_unix.go",
		"unix.LOCK_EX|unix.LOCK_NB", "unix.LOCK_SH|unix.LOCK_NB"},
	{"session-counter-no-crc", "§2: a damaged counter is refused, never guessed", "certs/sessions.go",
		"uint32(want) != crc32.Checksum([]byte(digits), castagnoli)", "uint32(want) != uint32(want)"},
	{"session-source-may-repeat", "§2: a new session is above the last one", "bakery/session.go",
		"if sess <= c.sess {", "if sess < c.sess {"},

	// Restarts keep each session's TTL (§5, §9).
	{"ttl-not-persisted", "§9: the TTL of a session is durable before its SessionOpen is acked", "server/core/clients.go",
		"if newTTL {", "if false && newTTL {"},
	{"restored-lease-not-fresh", "§5, §9: a restarted server votes no sooner than a whole TTL after its first tick", "detector/muteness.go",
		"if l.until.IsZero() {\n\t\t\t\tl.until = now.Add(l.ttl)", "if false {\n\t\t\t\tl.until = now.Add(l.ttl)"},
	{"ttl-kept-after-reset", "§9: a reset session's TTL is deleted (what is kept stays bounded)", "server/core/core.go",
		"if sess <= cert.Session {\n\t\t\te.Persist = append(e.Persist, Record{Bucket: bucketTTL", "if sess < cert.Session {\n\t\t\te.Persist = append(e.Persist, Record{Bucket: bucketTTL"},

	// Nothing is dropped for good (§3.3, §3.5).
	{"overflow-never-repaired", "§3.5: a send that overflowed is repaired by a resync", "server/core/repair.go",
		"if !now.Before(at) {", "if false && !now.Before(at) {"},
	{"resync-without-certificates", "§3.5, change 5: a resync carries the certificates of the clients it holds", "server/core/peers.go",
		"if cert := k.mute.Certificate(c); cert != nil {\n\t\t\tsend(", "if cert := k.mute.Certificate(c); cert != nil && false {\n\t\t\tsend("},
	{"resend-storm", "§6, §8: a client answers each resend request once per server (no storm a server can feed)", "bakery/client.go",
		"if a.resent[key] {\n\t\t\t\treturn\n\t\t\t}", "_ = key"},
	{"refusal-fails-one-early", "§6, change 17: a refused access fails only once fewer than q servers can answer it", "quorum/access.go",
		"n-len(a.rejected) < a.q }", "n-len(a.rejected) <= a.q }"},
	{"refusal-fails-one-late", "§6, change 17: a refused access fails as soon as fewer than q servers can answer it", "quorum/access.go",
		"n-len(a.rejected) < a.q }", "n-len(a.rejected) < a.q-1 }"},
	{"session-refusal-one-early", "§6, change 17: a refused session fails only once fewer than q servers can accept it", "bakery/session.go",
		"if c.cfg.N-len(c.sessionRefusals) >= c.q {", "if c.cfg.N-len(c.sessionRefusals) > c.q {"},
	{"older-session-renewed", "§5, change 18: an older session is not renewed once a newer one is known", "detector/muteness.go",
		"if n := len(cs.leases); n > 0 && cs.leases[n-1].session > sess {", "if n := len(cs.leases); n > 0 && cs.leases[n-1].session > sess+1 {"},
	{"vote-beside-older-lease", "§5, change 18: no vote on a session while an older one's lease lives", "detector/muteness.go",
		"if l.session < sess && !l.suspected && now.Before(l.until) {", "if l.session < sess-1 && !l.suspected && now.Before(l.until) {"},
	{"voted-session-acked-again", "§5: a session this server voted on is never acked again", "detector/muteness.go",
		"if sess <= cs.votedUpTo {", "if sess < cs.votedUpTo {"},
	{"voted-blocks-observe", "§5, change 18: a server that voted on a newer session still starts a lease to vote on an older one (f+1 votes)", "detector/muteness.go",
		"\t\treturn nil, ErrTooManySessions // the oldest suspected one goes first; else refuse", "\t\treturn nil, ErrTooManySessions\n\t}\n\tif sess <= cs.votedUpTo {\n\t\treturn nil, ErrSessionSuspected"},
	{"deferred-unbounded", "§6, change 18: the deferred sessions of a client are bounded", "detector/muteness.go",
		"if len(cs.deferred) >= m.cfg.MaxDeferred && !m.known(cs, sess) {", "if len(cs.deferred) > m.cfg.MaxDeferred && !m.known(cs, sess) {"},
	{"relisten-never", "§3.3, change 20: a LISTEN that passes nobody for a TTL is renewed", "bakery/session.go",
		"\t\t\t\tc.relisten(now, a, e)\n", ""},
	{"relisten-late", "§3.3, change 20: the LISTEN is renewed once a TTL passed without progress", "bakery/listen.go",
		"now.Sub(a.progress) < c.cfg.TTL {", "now.Sub(a.progress) <= c.cfg.TTL {"},
	{"relisten-all-members", "§3.3, change 20: the renewed LISTEN names the members still ahead only", "bakery/listen.go",
		"c.toAll(e, a.listen(waiting))", "c.toAll(e, a.listen(a.others))"},
	{"held-released-while-blocked", "change 27: a held LISTEN is answered only once no member is ahead of its client at the server", "activeset/held.go",
		"if l.blocks(s) {\n\t\treturn nil\n\t}", "if false && l.blocks(s) {\n\t\treturn nil\n\t}"},
	{"held-settled-not-reported", "change 27: a held report carries the value that settled each member, as it settled", "activeset/held.go",
		"\t\tl.describe(s.held, c, certFor)\n", ""},
	{"hold-ignored", "change 27: a server holds a LISTEN that asks for it (herd-free)", "server/core/clients.go",
		"Hold: l.Hold}", "Hold: false}"},
	{"vouch-f", "change 28: a statement counts unverified only when f+1 distinct servers sent it", "bakery/vouch.go",
		"if len(cl.by) > c.cfg.F {", "if len(cl.by) >= c.cfg.F {"},
	{"members-vouch-f", "change 28: a member named by at most f of SET-TICKET's q answers needs a statement that verifies", "bakery/vouch.go",
		"if len(by) <= c.cfg.F && c.answered(lock, id, answers) == nil {", "if len(by) < c.cfg.F && c.answered(lock, id, answers) == nil {"},
	{"members-other-lock", "§3.2, change 28: a member named by at most f answers joins S' only by a statement of this lock", "bakery/vouch.go",
		"if st, err := c.verify(cd.ss); err == nil && st.Lock == lock {", "if st, err := c.verify(cd.ss); err == nil {"},
	{"leader-one-report", "§11: a register value counts toward the leader only when f+1 replies hold it", "bakery/leader.go",
		"if rp.count < f+1 {", "if rp.count < f {"},
	{"leader-value-one-report", "§11: a leader's value counts only when f+1 replies hold the same proclamation", "bakery/leader.go",
		"if sy.count < f+1 || b.Session != head.session", "if sy.count < f || b.Session != head.session"},
	{"leader-claim-unverified", "§11: a group of reports that f+1 replies hold counts only once its signature verifies", "bakery/leader.go",
		"if _, err := rp.ss.Verify(cluster); err != nil {", "if false {"},
	{"leader-value-unverified", "§11: a proclamation that f+1 replies hold counts only once its signature verifies", "bakery/leader.go",
		"if _, err := sy.sp.Verify(cluster); err == nil {", "if true {"},
	{"leader-proclamations-uncapped", "§11: a reader looks at no more than the first 4 proclamations of a reply", "bakery/leader.go",
		"r.Proclamations[:min(len(r.Proclamations), wire.MaxStatusProclamations)]", "r.Proclamations"},
	{"leader-ticket-ahead", "§11: no leader while a counting Ticket is below the least Held", "bakery/leader.go",
		"head, held = &c, c.phase == wire.PhaseHeld", "head, held = &c, true"},
	{"proclaim-any-attempt", "§11: a server keeps a proclamation only for the client's present Ticket or Held", "server/core/proclaim.go",
		"|| !b.Matches(held) {", "{"},
	{"proclaim-older-rev", "§11: a lower Rev never replaces a kept proclamation", "server/core/proclaim.go",
		"case b.Rev < old.body.Rev:", "case b.Rev < old.body.Rev && false:"},
	{"status-proclamations-unbounded", "§11: a Status reply carries at most 4 proclamations, of Held members, lowest token first", "server/core/proclaim.go",
		"for _, en := range held[:min(len(held), maxStatusProclamations)] {", "for _, en := range held {"},
	{"omega-largest-level", "§11.1: a candidate's level is the (t+1)-th largest punishment, so t Byzantine rows cannot raise it", "omega/oracle.go",
		"return col[o.m-1-o.cfg.T]", "return col[o.m-1]"},
	{"omega-stale-advances", "§11.1: a register that did not advance since the previous read is punished", "omega/oracle.go",
		"return r.Incarnation > inc || (r.Incarnation == inc && r.Alive > alive)", "return r.Incarnation > inc || (r.Incarnation == inc && r.Alive >= alive)"},
	{"proclaim-not-resent", "§11: the leader resends its latest proclamation on every new connection", "client.go",
		"\t\t\t\tc.reproclaim(ev.From.Server)\n", ""},
	{"own-view-by-body", "§3.2: a server skips the check of its own View in J only for the exact bytes it signed", "server/core/verifycache.go",
		"for _, part := range [][]byte{v.Signed.Body, v.Signed.Sig} {", "for _, part := range [][]byte{v.Signed.Body} {"},
	{"claim-never-resolved", "change 28, §3.3: a claim above a member's best is verified before the decision", "bakery/listen.go",
		"\t\t\tc.resolve(now, r) // what one server alone claimed, verified now if it can matter\n", ""},
	{"released-relistens", "change 27: a client does not listen again after a released report", "bakery/listen.go",
		"if u.Last && !u.Released {", "if u.Last {"},
	{"suspected-listen-held", "change 27: once its session is suspected, a client listens without Hold", "bakery/listen.go",
		"if c.lease == nil || c.lease.Suspicions() == 0 {", "if true {"},
	{"choosing-never-stuck", "§3.3, §5, change 21: a suspected session whose LISTEN waits a TTL for a member's Doorway starts over", "bakery/session.go",
		"if a.phase == phaseListen && c.choosingTooLong(now, a) {", "if false && a.phase == phaseListen && c.choosingTooLong(now, a) {"},
	{"choosing-stuck-late", "§3.3, §5, change 21: the session starts over once the Doorway was reported for a TTL", "bakery/session.go",
		"now.Sub(r.choosingSince) >= c.cfg.TTL {", "now.Sub(r.choosingSince) > c.cfg.TTL {"},
	{"listen-refusal-ignored", "§3.3: a refused Listen counts as that server's answer", "bakery/client.go",
		"c.listenRefusedBy(a, s, err, e)", "_ = err"},
}

// CheckCatalogue reports every problem with mutants against the code under
// root: a name used twice, an empty rule, a no-op replacement, a missing
// file, or a snippet that does not occur exactly once in its file.
func CheckCatalogue(root string, mutants []Mutant) []error {
	var errs []error
	names := make(map[string]bool)
	for _, m := range mutants {
		if m.Name == "" || strings.ContainsAny(m.Name, " \t\n") {
			errs = append(errs, fmt.Errorf("mutant %q: a name is one word", m.Name))
		}
		if names[m.Name] {
			errs = append(errs, fmt.Errorf("mutant %s: the name is used twice", m.Name))
		}
		names[m.Name] = true
		if m.Rule == "" {
			errs = append(errs, fmt.Errorf("mutant %s: no rule", m.Name))
		}
		if m.From == "" || m.From == m.To {
			errs = append(errs, fmt.Errorf("mutant %s: the replacement changes nothing", m.Name))
		}
		b, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			errs = append(errs, fmt.Errorf("mutant %s: %w", m.Name, err))
			continue
		}
		if n := strings.Count(string(b), m.From); n != 1 {
			errs = append(errs, fmt.Errorf("mutant %s: %s holds the snippet %q %d times, want exactly 1", m.Name, m.File, m.From, n))
		}
	}
	return errs
}
