package core

import (
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// proposeOne is epoch 1 of c (server 3 replaced by a new id 4) as the
// operator proposes it: signed by ca, not endorsed.
func (c *cluster) proposeOne(ca *crypto.PrivateKey) crypto.Signed {
	return c.epochOne(ca).Signed
}

// errorsIn are the details of the Error replies in ms.
func errorsIn(ms []*wire.Message) []string {
	var out []string
	for _, err := range errorReplies(ms) {
		out = append(out, err.Detail)
	}
	return out
}

// docs/protocol.md change 49, a member's side: shown a proposed epoch (the
// cluster CA's signature, the epoch after its newest), a member endorses it
// once — persisted before its endorsement leaves — sends what it gathered
// to the other members and back to the operator, and adopts the epoch (it
// seals) once q members endorsed it. It never endorses another epoch of that
// number, not after a restart either; endorsements that do not verify add
// nothing.
func TestMembersEndorseOnceAndAdoptAtQ(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	op := c.newClient()
	p := c.proposeOne(ca)

	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	h, ok := c.cores[0].Endorsed(1)
	require.True(t, ok)
	require.Equal(t, wire.EpochHash(p), h)
	require.Contains(t, c.disks[0][bucketEndorsed], string(epochKey(1)), "persisted with the endorsement")
	reply := c.replies(op.id)
	require.Len(t, reply, 1)
	require.NotNil(t, reply[0].Endorse)
	require.Len(t, reply[0].Endorse.Endorsements, 1, "the operator hears the endorsement")
	require.Len(t, c.inflight, 3, "and every other member")
	_, knows := c.cores[0].Epoch()
	require.Zero(t, knows, "one endorsement of q = 3: epoch 1 does not count yet")

	// A faulty server shows server 1 endorsements forged in servers 2's
	// and 3's names: they count for nothing, and server 1 endorses too.
	outsider, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	var forged []wire.SignedEndorsement
	for _, s := range []wire.ServerID{2, 3} {
		es, err := wire.SignEndorsement(outsider, c.keys.Cluster, s, 1, p)
		require.NoError(t, err)
		forged = append(forged, es)
	}
	c.drop()
	c.fromServer(1, 3, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Endorsements: forged}})
	_, knows = c.cores[1].Epoch()
	require.Zero(t, knows, "forged endorsements add nothing")
	c.drop()

	// With server 0's and server 1's, server 2's makes three: it adopts.
	c.fromClient(2, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Endorsements: c.cores[1].endorseMsg(c.cores[1].pending).Endorsements}})
	_, knows = c.cores[2].Epoch()
	require.Zero(t, knows, "servers 1 and 2: two")
	c.fromClient(2, op.id, &wire.Message{Endorse: reply[0].Endorse})
	_, knows = c.cores[2].Epoch()
	require.Equal(t, uint64(1), knows, "servers 0, 1 and 2 endorsed it: it counts, and server 2 sealed epoch 0")
	c.flush()
	for s := range 4 {
		_, knows := c.cores[s].Epoch()
		require.Equal(t, uint64(1), knows, "s%d learns the endorsed epoch", s)
	}

	// Once it holds the epoch, a member answers whoever shows it with
	// fewer than q endorsements (the operator gathering late, a peer
	// behind) with the q it counted with, and one that shows q with
	// nothing: two holders never answer each other for ever.
	c.replies(op.id)
	c.fromClient(3, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	late := c.replies(op.id)
	require.Len(t, late, 1)
	require.NotNil(t, late[0].Endorse)
	require.Len(t, late[0].Endorse.Endorsements, 3, "the operator completes the epoch from any holder")
	c.drop()
	c.fromServer(3, 0, late[0])
	require.Empty(t, c.inflight, "a holder shown q endorsements answers nothing")

	// Another epoch 1, signed by the same CA (its key leaked): no member
	// endorses it, not even after a restart.
	other := c.epochOne(ca).Signed
	c.restart(3)
	c.replies(op.id)
	for s := range 4 {
		c.fromClient(s, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: other}})
	}
	require.NotEmpty(t, errorsIn(c.replies(op.id)))
	c.restart(0)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: other}})
	for _, m := range c.replies(op.id) {
		require.Nil(t, m.Endorse, "server 0 endorses nothing else")
	}
}

// A member that endorsed one epoch refuses every other of its number, also
// after a restart: two epochs with one number would need 2q endorsements of
// n members, so a correct member's twice — the CA's key alone forks nothing.
func TestAMemberEndorsesOneEpochOfANumber(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	op := c.newClient()
	a, b := c.proposeOne(ca), c.proposeOne(ca)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: a}})
	c.replies(op.id)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: b}})
	errs := errorsIn(c.replies(op.id))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "endorsed another epoch 1")
	c.restart(0)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: b}})
	errs = errorsIn(c.replies(op.id))
	require.Len(t, errs, 1, "its endorsement is on its disk")
	require.Contains(t, errs[0], "endorsed another epoch 1")
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: a}})
	ms := c.replies(op.id)
	require.Len(t, ms, 1)
	require.NotNil(t, ms[0].Endorse, "the epoch it endorsed it endorses again (the same signature)")
}

// On a closed cluster a member endorses only what the operator approved
// with a client CA key in force: the cluster CA's key alone adds no member.
func TestClosedClusterMembersEndorseOnlyApprovedEpochs(t *testing.T) {
	c := newCluster(t, 4, 1)
	cca, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.clientCA = cca
	ca := c.withCA()
	op := c.newClient()
	c.connect(op, windowed(&wire.AdmissionBody{Name: "operator", Client: op.id, Locks: []string{".bq-operator"}}))
	p := c.proposeOne(ca)

	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	errs := errorsIn(c.replies(op.id))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "not approved")
	_, ok := c.cores[0].Endorsed(1)
	require.False(t, ok)

	thief, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	bad, err := wire.SignApproval(thief, c.keys.Cluster, 1, p)
	require.NoError(t, err)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: &bad}})
	require.Contains(t, errorsIn(c.replies(op.id))[0], "no approver in force signed")

	good, err := wire.SignApproval(cca, c.keys.Cluster, 1, p)
	require.NoError(t, err)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: &good}})
	_, ok = c.cores[0].Endorsed(1)
	require.True(t, ok, "approved: endorsed")
	require.Empty(t, errorsIn(c.replies(op.id)))
}

// docs/protocol.md change 49, with changes 13 and 29 on lazy records: a
// member's endorsement is on its disk before it leaves — its record is
// eager, so the batch's messages wait for the commit — never a lazy record
// that may follow the messages. Else a crash right after the endorsement
// left loses the record, and the member, restarted, endorses another epoch
// of the same number: two epochs of one number could each gather q
// endorsements (2q > n + f), and the CA's key alone forks the cluster.
func TestAnEndorsementIsOnDiskBeforeItLeaves(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	op := c.newClient()
	p := c.proposeOne(ca)
	e := c.cores[0].Step(c.now, Input{From: wire.ClientPeer(op.id), Msg: roundTrip(t, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})})
	var endorsed []Record
	for _, r := range e.Persist {
		if r.Bucket == bucketEndorsed {
			endorsed = append(endorsed, r)
		}
	}
	require.Len(t, endorsed, 1, "the endorsement is persisted in the batch it leaves in")
	require.False(t, endorsed[0].Lazy, "and not lazily: the batch's messages wait for it")
	require.True(t, Eager(e.Persist))
	sent := 0
	for _, o := range e.Send {
		if o.Msg.Endorse != nil {
			sent++
		}
	}
	require.Equal(t, 4, sent, "the endorsement goes to the other members and back to the operator")
}

// docs/protocol.md changes 49 and 52: on a closed cluster a member endorses
// only an epoch approved with a client CA in force in the newest epoch it
// holds — not one a retired client CA signed. Epoch 1 retired the first
// client CA for a new one; an approval of epoch 2 by the retired key is
// refused, one by the new key endorsed. Else whoever holds a retired client
// CA's key — retired, perhaps, because it leaked — approves epochs that add
// members of their choosing.
func TestARetiredClientCAApprovesNoEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	retired, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.clientCA = retired
	ca := c.withCA()
	inForce, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	var members []wire.EpochMember
	for i, key := range c.keys.Servers {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}})
	}
	oneSigned, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 1, Prev: [32]byte(c.keys.Cluster), Members: members, F: 1,
		ClientCAs: []crypto.PublicKey{inForce.Public.Wire}})
	require.NoError(t, err)
	one := c.endorse(oneSigned, 1, 0, 1, 2)
	op := c.newClient()
	c.connect(op, windowed(&wire.AdmissionBody{Name: "operator", Client: op.id, Locks: []string{".bq-operator"}}))
	c.fromClient(0, op.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	_, knows := c.cores[0].Epoch()
	require.Equal(t, uint64(1), knows)
	c.drop()
	c.replies(op.id)

	two, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 2, Prev: wire.EpochHash(oneSigned), Members: members, F: 1,
		ClientCAs: []crypto.PublicKey{inForce.Public.Wire}})
	require.NoError(t, err)
	old, err := wire.SignApproval(retired, c.keys.Cluster, 2, two)
	require.NoError(t, err)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: two, Approval: &old}})
	errs := errorsIn(c.replies(op.id))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "no approver in force signed", "the retired client CA approves nothing")
	_, ok := c.cores[0].Endorsed(2)
	require.False(t, ok)

	good, err := wire.SignApproval(inForce, c.keys.Cluster, 2, two)
	require.NoError(t, err)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: two, Approval: &good}})
	require.Empty(t, errorsIn(c.replies(op.id)))
	_, ok = c.cores[0].Endorsed(2)
	require.True(t, ok, "the client CA in force does")
}

// approve is the operator's approval of epoch n, signed as s, with key.
func (c *cluster) approve(key *crypto.PrivateKey, n uint64, s crypto.Signed) *crypto.Signed {
	a, err := wire.SignApproval(key, c.keys.Cluster, n, s)
	require.NoError(c.t, err)
	return &a
}

// docs/protocol.md change 65: on an open cluster whose cluster file names
// an approver, a member endorses only what the operator approved with an
// approver in force — not a proposal without an approval, nor one approved
// by another key (the cluster CA's own included) — and then endorses it.
func TestOpenClusterMembersEndorseOnlyApprovedEpochs(t *testing.T) {
	c := newCluster(t, 4, 1)
	op, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.approver = op
	ca := c.withCA()
	cl := c.newClient()
	p := c.proposeOne(ca)

	c.fromClient(0, cl.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	errs := errorsIn(c.replies(cl.id))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "not approved")
	for name, key := range map[string]*crypto.PrivateKey{"the cluster CA's key": ca, "another key": c.signers[1]} {
		c.fromClient(0, cl.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: c.approve(key, 1, p)}})
		errs = errorsIn(c.replies(cl.id))
		require.Len(t, errs, 1, name)
		require.Contains(t, errs[0], "no approver in force signed", name)
	}
	other := c.proposeOne(ca)
	c.fromClient(0, cl.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: c.approve(op, 1, other)}})
	require.Contains(t, errorsIn(c.replies(cl.id))[0], "of another epoch", "an approval is of one proposal")
	_, ok := c.cores[0].Endorsed(1)
	require.False(t, ok, "nothing endorsed yet")

	c.fromClient(0, cl.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: c.approve(op, 1, p)}})
	require.Empty(t, errorsIn(c.replies(cl.id)))
	h, ok := c.cores[0].Endorsed(1)
	require.True(t, ok, "approved by the operator key: endorsed")
	require.Equal(t, wire.EpochHash(p), h)
}

// Issue 54, item 3, the scenario: whoever holds the cluster CA's key alone
// signs a different epoch 1 for each member and shows it to each before the
// operator does, approved with the CA's key or with none. On an open
// cluster without an approver each member would endorse the first it saw
// and refuse every other for good: no epoch 1 would ever reach q, and
// every later change would be frozen. With an approver, no member endorses
// the thief's proposals, so the operator's approved epoch 1, shown after
// them, is endorsed by every member and adopted.
func TestTheCAKeyAloneFreezesNoChange(t *testing.T) {
	c := newCluster(t, 4, 1)
	op, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.approver = op
	ca := c.withCA()
	thief, operator := c.newClient(), c.newClient()
	for s := range 4 {
		own := c.proposeOne(ca)
		c.fromClient(s, thief.id, &wire.Message{Endorse: &wire.Endorse{Proposal: own}})
		c.fromClient(s, thief.id, &wire.Message{Endorse: &wire.Endorse{Proposal: own, Approval: c.approve(ca, 1, own)}})
		_, ok := c.cores[s].Endorsed(1)
		require.False(t, ok, "s%d endorses no proposal of the CA's key alone", s)
	}
	require.Len(t, errorsIn(c.replies(thief.id)), 8)
	require.Empty(t, c.inflight, "and sends its peers nothing")

	p := c.proposeOne(ca)
	c.fromClient(0, operator.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p, Approval: c.approve(op, 1, p)}})
	c.flush()
	for s := range 4 {
		_, knows := c.cores[s].Epoch()
		require.Equal(t, uint64(1), knows, "s%d adopted the operator's epoch 1", s)
		h, ok := c.cores[s].Endorsed(1)
		require.True(t, ok)
		require.Equal(t, wire.EpochHash(p), h)
	}
}

// docs/protocol.md change 65, a rotation: epoch 1 names a new operator key
// in place of the cluster file's (bqserver ca rotate-operator, approved by
// the old one). Once a member holds epoch 1, an approval of epoch 2 by the
// old key — retired, perhaps, because it leaked — is refused, and one by the
// new key is endorsed.
func TestARotatedApproverApprovesNoEpoch(t *testing.T) {
	c := newCluster(t, 4, 1)
	old, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c.approver = old
	ca := c.withCA()
	next, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	var members []wire.EpochMember
	for i, key := range c.keys.Servers {
		members = append(members, wire.EpochMember{ID: wire.ServerID(i), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}})
	}
	oneSigned, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 1, Prev: [32]byte(c.keys.Cluster), Members: members, F: 1,
		Approvers: []crypto.PublicKey{next.Public.Wire}})
	require.NoError(t, err)
	op := c.newClient()
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: oneSigned, Approval: c.approve(old, 1, oneSigned)}})
	require.Empty(t, errorsIn(c.replies(op.id)), "the old key approves the rotation")
	c.fromClient(0, op.id, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{c.endorse(oneSigned, 1, 0, 1, 2)})})
	_, knows := c.cores[0].Epoch()
	require.Equal(t, uint64(1), knows)
	c.drop()
	c.replies(op.id)

	two, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 2, Prev: wire.EpochHash(oneSigned), Members: members, F: 1,
		Approvers: []crypto.PublicKey{next.Public.Wire}})
	require.NoError(t, err)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: two, Approval: c.approve(old, 2, two)}})
	errs := errorsIn(c.replies(op.id))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "no approver in force signed", "the retired operator key approves nothing")
	_, ok := c.cores[0].Endorsed(2)
	require.False(t, ok)

	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: two, Approval: c.approve(next, 2, two)}})
	require.Empty(t, errorsIn(c.replies(op.id)))
	_, ok = c.cores[0].Endorsed(2)
	require.True(t, ok, "the operator key in force does")
}

// docs/protocol.md change 49: a member shows a peer that connects the
// proposal it endorsed and what it gathered for it. Endorsements go to the
// peers only when they grow, so three members that each endorsed while cut
// off from one another would otherwise never pool their endorsements once
// connected again, and the change would wait for the operator's command
// (simulator seed 54100847: the two halves of a partition).
func TestMembersPoolEndorsementsWhenTheyReconnect(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	op := c.newClient()
	p := c.proposeOne(ca)
	for s := range 3 {
		c.fromClient(s, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
		c.drop() // cut off: what each sends its peers is lost
	}
	c.replies(op.id)
	for s := range 4 {
		_, knows := c.cores[s].Epoch()
		require.Zero(t, knows, "one endorsement each")
	}
	for _, s := range []int{1, 2} {
		c.effects(s, c.cores[s].Step(c.now, Input{Kind: InputConnected, From: wire.ServerPeer(0)}))
	}
	c.flush()
	for s := range 4 {
		_, knows := c.cores[s].Epoch()
		require.EqualValues(t, 1, knows, "s%d: the reconnected members pooled q endorsements", s)
	}
}
