package main

// The reconfiguration rules of issue 54, item 5: each weakened by one here
// is killed by a fast test of its own package (docs/protocol.md changes 43,
// 47, 49, 52, 57). They join Catalogue at init.
var pinMutants = []Mutant{
	{"epoch-highest-id-reused", "change 43: ids are never reused, the highest ever used included", "wire/epoch.go",
		"\tfor id := ServerID(0); id <= c.maxID; id++ {", "\tfor id := ServerID(0); id < c.maxID; id++ {"},
	{"epoch-next-ca-any-cert", "change 43: an epoch's next CA is a CA certificate", "wire/epoch.go",
		"if !ok || !cert.IsCA {", "if !ok {"},
	{"old-epoch-cert-q-1", "change 43, change 47: a certificate of an earlier epoch read back needs that epoch's own quorum", "detector/votes.go",
		"\t\t\tkeys, q = k, kq\n", "\t\t\tkeys, q = k, kq-1\n"},
	{"revote-lease-default-ttl", "change 57, change 63: a vote of the epoch before waits its client's TTL from the copy's end, not the default", "detector/copy.go",
		"l.ttl = max(l.ttl, ttl)", "l.ttl = m.cfg.DefaultTTL"},
	{"revote-default-ttl", "change 57, change 63: a vote of the epoch before whose lease is gone waits its client's TTL, not the default", "detector/copy.go",
		"\tttl, ok := cs.ttls[sess]\n", "\tttl, ok := m.cfg.DefaultTTL, false\n"},
	{"move-lease-q-1", "change 43 (3): after a move a client's lease needs q acks of the new epoch's members", "bakery/epoch.go",
		"c.lease = quorum.NewLease(c.q, c.cfg.TTL,", "c.lease = quorum.NewLease(c.q-1, c.cfg.TTL,"},
	{"copy-served-before-caught-up", "change 43: a copy of an epoch is handed out only by a member that served it or caught up with it", "server/core/copy.go",
		"r.Epoch > k.cfg.Keys.Epoch {", "r.Epoch > k.cfg.Keys.Epoch+1 {"},
	{"copy-done-on-first-part", "change 43: a copy counts a member's state only when its last part came", "server/core/copier.go",
		"\tif p.Last {\n\t\trun.done[s] = true", "\tif p.Last || p.Part == 1 {\n\t\trun.done[s] = true"},
	{"removed-member-resets", "change 43: a removed member is no peer, for a certificate too", "server/core/peers.go",
		"if k.cfg.Keys.Key(s) == nil {", "if k.cfg.Keys.Key(s) == nil && m.Reset == nil {"},
	{"copy-f-of-epoch-into", "change 47: copied sessions and counters are vouched for by f+1 of the epoch copied from, with its f", "server/core/copier.go",
		"q: q, f: k.chain.Faults(to - 1),", "q: q, f: k.chain.Faults(to),"},
	{"copied-lease-yields-to-f", "change 47: a copied lease gives way only to f+1 votes of the epoch served", "server/core/core.go",
		"k.mute.VoteCount(body.Client, body.Session) > k.cfg.F {", "k.mute.VoteCount(body.Client, body.Session) > k.cfg.F-1 {"},
	{"copy-older-held-unbounded", "change 47: a copier keeps at most maxCopyClients Tickets of earlier epochs per reporter", "server/core/copier.go",
		"if run.olderOf[s] >= k.maxCopyClients() {\n\t\t\treturn // a faulty", "if run.olderOf[s] > k.maxCopyClients() {\n\t\t\treturn // a faulty"},
	{"copy-older-reports-past-bound", "change 47: a reporter at its bound of earlier epochs' Tickets vouches for no more", "server/core/copier.go",
		"if run.olderOf[s] >= k.maxCopyClients() {\n\t\t\treturn\n", "if run.olderOf[s] > k.maxCopyClients() {\n\t\t\treturn\n"},
	{"endorsement-lazy", "change 49 (with changes 13, 29): a member's endorsement is on its disk before it leaves", "server/core/endorse.go",
		"Record{Bucket: bucketEndorsed, Key: epochKey(n), Value: append(h[:], mustMarshal(&es)...)})", "Record{Bucket: bucketEndorsed, Key: epochKey(n), Value: append(h[:], mustMarshal(&es)...), Lazy: true})"},
	{"retired-ca-approves", "change 49, change 52: on a closed cluster only a client CA in force approves an epoch", "server/core/endorse.go",
		"\tinForce, _ := k.chain.ClientCAs(k.cfg.ClientCA)\n\treturn wire.VerifyApproval", "\t_, inForce := k.chain.ClientCAs(k.cfg.ClientCA)\n\treturn wire.VerifyApproval"},
	{"door-admits-retired-ca", "change 52: the door admits by the client CAs in force, not every client CA ever listed", "server/server.go",
		"\tinForce, _ := k.Chain().ClientCAs(s.Material.Cluster.ClientCA)", "\t_, inForce := k.Chain().ClientCAs(s.Material.Cluster.ClientCA)"},
}

func init() { Catalogue = append(Catalogue, pinMutants...) }
