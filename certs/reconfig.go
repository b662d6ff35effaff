package certs

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The operator's side of reconfiguration (docs/protocol.md changes 43 and
// 48): `bqserver server add`, `remove` and `replace` plan the next epoch
// from the cluster directory, sign it with the cluster CA, approve it with
// the client CA key in force (a closed cluster's) or the operator key in
// force (an open cluster's, change 65), and write it beside the
// cluster file as a proposal, with a new member's private material; the
// command then gathers the members' endorsements and writes the epoch
// (Complete).

// Change is one change of the members.
type Change struct {
	// Remove is the member to take out (server remove, replace).
	Remove *wire.ServerID
	// Add makes a new member (server add, replace) at Host:Port; empty
	// Host and zero Port pick the removed member's host, or the first
	// member's, and the next port above every member's there.
	Add  bool
	Host string
	Port int
	// RotateCA makes a new cluster CA, named by the next epoch (the same
	// members), which signs every epoch after it; alone.
	RotateCA bool
	// RotateClientCA makes a new client CA, listed by the next epoch beside
	// the ones in force: it enrolls and renews from then on, and clients of
	// the old ones are still admitted until RetireClientCAs. Alone.
	RotateClientCA bool
	// RetireClientCAs lists only the newest client CA in the next epoch:
	// admission certificates of the older ones are refused from then on.
	RetireClientCAs bool
	// RotateOperator makes a new operator approval key of an open cluster,
	// which the next epoch names in place of the one in force (change 65):
	// the old key approves that epoch, the new one every later. Alone.
	RotateOperator bool
}

// Plan is the next epoch, proposed, and what it needs written.
type Plan struct {
	Before *wire.EpochBody // the newest epoch now (epoch 0 as a body)
	Next   *wire.EpochBody
	// Proposal is the next epoch signed by the cluster CA, with the
	// operator's approval (a closed cluster's, and an open cluster's with
	// an approver in force), and no endorsement yet.
	Proposal *wire.Endorse
	Added    *NewMember // nil if the change adds no one
	NextCA   *CA        // the rotation's new CA, nil if none
	// NextClientCA is a client-CA rotation's new key, nil if none.
	NextClientCA *crypto.PrivateKey
	// NextOperator is an operator-key rotation's new key, nil if none.
	NextOperator *crypto.PrivateKey
}

// PlanChange makes the next epoch of the cluster in dir for ch, signed with
// the CA key in dir/ca. It writes nothing (Plan.Write does).
func PlanChange(dir string, ch Change, now time.Time, rand io.Reader) (*Plan, error) {
	ca, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	if err != nil {
		return nil, err
	}
	chain, epochs, err := c.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	if _, pending, err := ReadProposal(dir, chain.Number()+1); err != nil {
		return nil, err
	} else if pending {
		return nil, fmt.Errorf("certs: epoch %d is proposed (%s) and not endorsed by the members yet: run 'bqserver server push --dir %s' when enough of them are up; one change at a time",
			chain.Number()+1, ProposalPath(dir, chain.Number()+1), dir)
	}
	before := c.bodyOf(chain)
	next := &wire.EpochBody{Cluster: c.ID(), Number: before.Number + 1, F: before.F, ClientCAs: before.ClientCAs,
		Members: slices.Clone(before.Members)}
	// The approvers in force go on in force (change 65): every epoch of an
	// open cluster names them, so each says who approves the next.
	for _, a := range c.ApproversIn(chain) {
		next.Approvers = append(next.Approvers, a.Wire)
	}
	if before.Number == 0 {
		next.Prev = [32]byte(c.ID())
	} else {
		next.Prev = wire.EpochHash(epochs[len(epochs)-1].Signed)
	}
	var removed *wire.EpochMember
	if ch.Remove != nil {
		i := slices.IndexFunc(next.Members, func(m wire.EpochMember) bool { return m.ID == *ch.Remove })
		if i < 0 {
			return nil, fmt.Errorf("certs: server %d is not a member of epoch %d (members: %s)", *ch.Remove, before.Number, idList(before.Members))
		}
		removed = &next.Members[i]
		r := *removed
		removed = &r
		next.Members = slices.Delete(next.Members, i, i+1)
	}
	p := &Plan{Before: before, Next: next}
	if (ch.RotateClientCA || ch.RetireClientCAs) && (ch.Add || ch.Remove != nil || ch.RotateCA || ch.RotateClientCA && ch.RetireClientCAs) {
		return nil, fmt.Errorf("certs: a client-CA rotation or retirement is a change of its own")
	}
	if ch.RotateOperator {
		if ch.Add || ch.Remove != nil || ch.RotateCA || ch.RotateClientCA || ch.RetireClientCAs {
			return nil, fmt.Errorf("certs: an operator-key rotation is a change of its own")
		}
		switch {
		case c.Closed():
			return nil, fmt.Errorf("certs: the cluster is closed: its changes are approved with the client CA's key; rotate that (bqserver ca rotate-clients)")
		case len(next.Approvers) == 0:
			return nil, fmt.Errorf("certs: the cluster file names no approver (made before docs/protocol.md change 65): there is no operator key to rotate, and its members endorse what the cluster CA signed; make a new cluster with 'bqserver init --open' to get one")
		}
		if p.NextOperator, err = crypto.GenerateKey(c.Scheme, rand); err != nil {
			return nil, err
		}
		next.Approvers = []crypto.PublicKey{p.NextOperator.Public.Wire}
	}
	if ch.RotateClientCA {
		if !c.Closed() {
			return nil, fmt.Errorf("certs: the cluster is open (no client CA): there is no client CA to rotate")
		}
		if len(next.ClientCAs) >= wire.MaxClientCAs {
			return nil, fmt.Errorf("certs: epoch %d lists %d client CAs already (at most %d): renew the clients and retire the old ones first (bqserver ca retire-clients)",
				before.Number, len(next.ClientCAs), wire.MaxClientCAs)
		}
		if p.NextClientCA, err = crypto.GenerateKey(c.Scheme, rand); err != nil {
			return nil, err
		}
		next.ClientCAs = append(slices.Clone(next.ClientCAs), p.NextClientCA.Public.Wire)
	}
	if ch.RetireClientCAs {
		cur, err := LoadClientCA(dir)
		if err != nil {
			return nil, err
		}
		if len(next.ClientCAs) == 1 {
			return nil, fmt.Errorf("certs: epoch %d lists one client CA only: there is nothing to retire", before.Number)
		}
		next.ClientCAs = []crypto.PublicKey{cur.Key.Public.Wire}
	}
	if ch.RotateCA {
		if ch.Add || ch.Remove != nil {
			return nil, fmt.Errorf("certs: a CA rotation changes no member: rotate, then add, remove or replace")
		}
		if p.NextCA, err = NewCA(fmt.Sprintf("%s (epoch %d)", c.Name, next.Number), now, rand); err != nil {
			return nil, err
		}
		next.NextCA = p.NextCA.Cert.Raw
	}
	if ch.Add {
		host, port := ch.Host, ch.Port
		if host == "" || port == 0 {
			dh, dp := defaultPlace(before.Members, removed, host)
			host, port = cmp.Or(host, dh), cmp.Or(port, dp)
		}
		id := maxID(c, chain) + 1
		if id == 0 {
			return nil, fmt.Errorf("certs: every server id has been used")
		}
		if err := checkPlace(net.JoinHostPort(host, strconv.Itoa(port)), next.Members); err != nil {
			return nil, err
		}
		if p.Added, err = ca.IssueMember(c, NewMemberOptions{ID: id, Host: host, Port: port, Epoch: next.Number}, now, rand); err != nil {
			return nil, err
		}
		next.Members = append(next.Members, p.Added.Entry)
	}
	if ch.Remove == nil && ch.Add || ch.Remove != nil && !ch.Add {
		// server add and remove: f follows n (server replace and a CA
		// rotation keep it).
		next.F = uint16(MaxFaults(len(next.Members)))
	}
	if len(next.Members) == 0 {
		return nil, fmt.Errorf("certs: removing server %d would leave no member", *ch.Remove)
	}
	signer, err := ca.EpochSigner()
	if err != nil {
		return nil, err
	}
	signed, err := wire.SignEpoch(signer, next)
	if err != nil {
		return nil, err
	}
	if _, err := chain.Check(signed); err != nil {
		return nil, fmt.Errorf("certs: internal error: the planned epoch does not continue the chain: %w", err)
	}
	p.Proposal = &wire.Endorse{Proposal: signed}
	if c.Closed() {
		// The operator's approval, with the client CA key in force before
		// the change: a member endorses nothing else (change 49).
		cca, err := LoadClientCA(dir)
		if err != nil {
			return nil, fmt.Errorf("certs: the members endorse an epoch of a closed cluster only with the client CA's approval: %w", err)
		}
		a, err := wire.SignApproval(cca.Key, c.ID(), next.Number, signed)
		if err != nil {
			return nil, err
		}
		p.Proposal.Approval = &a
	} else if approvers := c.ApproversIn(chain); len(approvers) > 0 {
		// An open cluster's approval, with the operator key in force
		// before the change, apart from the CA's key: the members endorse
		// nothing else, so the CA's key alone takes no number (change 65).
		op, err := loadOperatorKey(dir, c, chain)
		if err != nil {
			return nil, err
		}
		a, err := wire.SignApproval(op, c.ID(), next.Number, signed)
		if err != nil {
			return nil, err
		}
		p.Proposal.Approval = &a
	}
	return p, nil
}

// Write writes the plan into dir: the new member's private material first,
// the proposal last, so a failure leaves no proposal naming missing
// material.
//
// A rotation writes the new CA's key beside the old one first, then the
// proposal; Complete puts the new key in place of the old once the epoch
// is endorsed (LoadCA takes either file, whichever is the key of the CA in
// force): no epoch names a CA whose key is not on disk, and the old key is
// gone once it is retired.
func (p *Plan) Write(dir string) error {
	if p.Added != nil {
		if err := p.Added.Write(dir); err != nil {
			return err
		}
	}
	next := filepath.Join(dir, CADirName, caNextKeyFile)
	if p.NextCA != nil {
		keyPEM, err := encodePKCS8(p.NextCA.Key)
		if err != nil {
			return err
		}
		_ = os.Remove(next) // a rotation that failed before its epoch was written
		w := &writer{}
		w.file(next, keyPEM, 0o600)
		if w.err != nil {
			return w.err
		}
	}
	nextClient := filepath.Join(dir, CADirName, clientCANextKeyFile)
	if p.NextClientCA != nil {
		_ = os.Remove(nextClient)
		w := &writer{}
		w.file(nextClient, encodeSigningKey(p.NextClientCA), 0o600)
		if w.err != nil {
			return w.err
		}
	}
	nextOperator := filepath.Join(dir, CADirName, operatorNextKeyFile)
	if p.NextOperator != nil {
		_ = os.Remove(nextOperator)
		w := &writer{}
		w.file(nextOperator, encodeSigningKey(p.NextOperator), 0o600)
		if w.err != nil {
			return w.err
		}
	}
	return WriteProposal(dir, p.Next.Number, p.Proposal)
}

// bodyOf is the newest epoch of chain as a body (epoch 0 from the cluster file).
func (c *Cluster) bodyOf(chain *wire.Chain) *wire.EpochBody {
	if b := chain.Current(); b != nil {
		return b
	}
	b := &wire.EpochBody{Cluster: c.ID(), F: uint16(c.F)}
	for _, s := range c.Servers {
		b.Members = append(b.Members, wire.EpochMember{ID: s.ID, Address: s.Address, Key: s.SigningKey.Wire, Cert: s.Cert.Raw, Endorse: s.Endorse})
	}
	if c.ClientCA != nil {
		b.ClientCAs = []crypto.PublicKey{c.ClientCA.Wire}
	}
	if c.Approver != nil {
		b.Approvers = []crypto.PublicKey{c.Approver.Wire}
	}
	return b
}

// maxID is the highest server id any epoch used (ids are never reused).
func maxID(c *Cluster, chain *wire.Chain) wire.ServerID {
	top := wire.ServerID(c.N - 1)
	for e := uint64(1); e <= chain.Number(); e++ {
		for _, m := range chain.Body(e).Members {
			top = max(top, m.ID)
		}
	}
	return top
}

// defaultPlace is where a new member goes when the operator does not say:
// host (or the removed member's, or the first member's) and the next port
// above every member's on that host.
func defaultPlace(members []wire.EpochMember, removed *wire.EpochMember, host string) (string, int) {
	addrs := make([]string, 0, len(members)+1)
	for _, m := range members {
		addrs = append(addrs, m.Address)
	}
	if removed != nil {
		addrs = append([]string{removed.Address}, addrs...)
	}
	if host == "" && len(addrs) > 0 {
		host, _, _ = net.SplitHostPort(addrs[0])
	}
	port := 7000
	for _, a := range addrs {
		h, ps, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(ps); err == nil && perr == nil && h == host && n >= port {
			port = n + 1
		}
	}
	return host, port
}

// TakesAddressOf is the member that leaves in p whose address the new
// member takes (a replacement in place), if there is one: the leaving
// server must stop before the new one can start.
func (p *Plan) TakesAddressOf() (wire.EpochMember, bool) {
	if p.Added == nil {
		return wire.EpochMember{}, false
	}
	norm, err := checkAddress(p.Added.Entry.Address)
	if err != nil {
		return wire.EpochMember{}, false
	}
	for _, m := range p.Before.Members {
		if _, kept := p.Next.Member(m.ID); kept {
			continue
		}
		if mn, err := checkAddress(m.Address); err == nil && mn == norm {
			return m, true
		}
	}
	return wire.EpochMember{}, false
}

// checkPlace refuses a new member's address that is not host:port with a
// dialable host, or that another member of the next epoch serves at (issue
// 44): two members at one address leave one of them unable to bind, and
// the peers dialing it meet the other's certificate. The same address
// spelled otherwise (an IPv6 form, a host's case) counts as the same.
func checkPlace(addr string, members []wire.EpochMember) error {
	norm, err := checkAddress(addr)
	if err != nil {
		return fmt.Errorf("certs: the new server's address %q %v", addr, err)
	}
	for _, m := range members {
		if mn, err := checkAddress(m.Address); err == nil && mn == norm {
			return fmt.Errorf("certs: %s is server %d's address: a new server needs an address of its own (--host, --port)", addr, m.ID)
		}
	}
	return nil
}

func idList(ms []wire.EpochMember) string {
	s := ""
	for i, m := range ms {
		if i > 0 {
			s += " "
		}
		s += strconv.Itoa(int(m.ID))
	}
	return s
}
