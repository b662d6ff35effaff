package core

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// withEndorsers gives every server endorsement keys from epoch 1 (change
// 64), named in epoch 0's keyring, and makes the cores again with them.
func (c *cluster) withEndorsers() {
	c.keys.Endorse = make([]*wire.EndorseKeys, len(c.cores))
	c.endorsers = make([]*wire.Endorser, len(c.cores))
	for i := range c.cores {
		en, err := wire.NewEndorser(rand.Reader, 1, 8)
		require.NoError(c.t, err)
		k := en.Keys()
		c.endorsers[i], c.keys.Endorse[i] = en, &k
	}
	for i := range c.cores {
		c.cores[i] = c.newCore(i, len(c.cores), c.cores[i].cfg.F)
	}
}

// proposeOneWithKeys is epoch 1 (server 3 replaced by server 4) as the
// operator proposes it on a cluster whose members have endorsement keys:
// the kept members keep theirs, server 4 has keys from epoch 2.
func (c *cluster) proposeOneWithKeys(ca *crypto.PrivateKey) crypto.Signed {
	k4, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(c.t, err)
	e4, err := wire.NewEndorser(rand.Reader, 2, 8)
	require.NoError(c.t, err)
	var members []wire.EpochMember
	for i, key := range []*crypto.Parsed{c.keys.Servers[0], c.keys.Servers[1], c.keys.Servers[2], k4.Public} {
		m := wire.EpochMember{ID: wire.ServerID(i + i/3), Address: "127.0.0.1:7000", Key: key.Wire, Cert: []byte{0x30}}
		if i < 3 {
			m.Endorse = c.keys.Endorse[i]
		} else {
			k := e4.Keys()
			m.Endorse = &k
		}
		members = append(members, m)
	}
	s, err := wire.SignEpoch(ca, &wire.EpochBody{Cluster: c.keys.Cluster, Number: 1, Prev: [32]byte(c.keys.Cluster), Members: members, F: 1})
	require.NoError(c.t, err)
	return s
}

// endorseKeyNext is the first epoch server s's persisted endorsement keys
// may still endorse.
func (c *cluster) endorseKeyNext(s int) uint64 {
	state := c.disks[s][BucketEndorseKey][string(endorseKeyState)]
	require.NotNil(c.t, state, "s%d persisted its endorsement keys' state", s)
	en := c.endorsers[s]
	back, err := wire.LoadEndorser(en.Keys(), en.Leaves(), state)
	require.NoError(c.t, err)
	return back.Next()
}

// docs/protocol.md change 64, a member's side: it endorses epoch N with its
// one-time key for N, and the state that destroys that key is on disk in
// the batch the endorsement leaves after; a member that adopts N without
// endorsing it destroys its key for N too. So what a member's files hold
// once it endorsed or adopted N signs no epoch N — not even with its store
// of endorsements lost — and a store that does not remember an endorsement
// the chain shows this server made is refused at start.
func TestAMemberEndorsesWithAKeyItThenDestroys(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	c.withEndorsers()
	op := c.newClient()
	p := c.proposeOneWithKeys(ca)

	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	reply := c.replies(op.id)
	require.Len(t, reply, 1)
	require.Len(t, reply[0].Endorse.Endorsements, 1)
	es := reply[0].Endorse.Endorsements[0]
	require.NotNil(t, es.OneTime, "signed with the one-time key")
	_, err := es.Verify(c.keys)
	require.NoError(t, err)
	require.Equal(t, uint64(2), c.endorseKeyNext(0), "the key of epoch 1 is destroyed on disk with the endorsement")

	// Server 0's files after the endorsement, its store of endorsements
	// lost: another epoch 1 gets no endorsement of it.
	delete(c.disks[0], bucketEndorsed)
	c.restart(0)
	other := c.proposeOneWithKeys(ca)
	c.drop()
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: other}})
	require.NotEmpty(t, errorsIn(c.replies(op.id)), "no key for epoch 1 any more")
	require.Empty(t, c.inflight)
	c.restart(0)
	c.fromClient(0, op.id, &wire.Message{Endorse: reply[0].Endorse})
	c.drop()
	c.replies(op.id)

	// Servers 1 and 2 endorse: q. Server 3, which endorsed nothing
	// (what the others sent it is lost), adopts the epoch from a peer and
	// destroys its key of epoch 1 too.
	for _, s := range []int{1, 2} {
		c.fromClient(s, op.id, &wire.Message{Endorse: reply[0].Endorse})
		reply = c.replies(op.id)
		require.NotEmpty(t, reply)
	}
	c.drop()
	_, knows := c.cores[2].Epoch()
	require.Equal(t, uint64(1), knows)
	c.fromServer(3, 2, &wire.Message{EpochNews: wire.NewsOf(c.cores[2].Chain().Since(0))})
	_, knows = c.cores[3].Epoch()
	require.Equal(t, uint64(1), knows)
	_, endorsed := c.cores[3].Endorsed(1)
	require.False(t, endorsed)
	require.Equal(t, uint64(2), c.endorseKeyNext(3), "adopting epoch 1 destroyed server 3's key for it")
	c.flush()

	// Server 1's store put back without its record of endorsing epoch 1,
	// which the epoch it holds carries: it does not start.
	delete(c.disks[1], bucketEndorsed)
	k := c.newCoreOf(1, c.configs[1])
	err = k.Restore(mapReader(c.disks[1]))
	require.ErrorContains(t, err, "does not remember making it")

	// Put back from before epoch 1 too: it starts, and when a peer shows
	// it the epoch that carries its endorsement it remembers it (no other
	// epoch 1 is endorsed) and counts the alarm.
	delete(c.disks[1], bucketEpoch)
	delete(c.disks[1], bucketServing)
	c.restart(1)
	c.fromServer(1, 2, &wire.Message{EpochNews: wire.NewsOf(c.cores[2].Chain().Since(0))})
	require.EqualValues(t, 1, c.cores[1].Stats.EndorsementsForgotten)
	h, ok := c.cores[1].Endorsed(1)
	require.True(t, ok)
	require.Equal(t, wire.EpochHash(p), h)
}

// docs/protocol.md change 64, two epochs of one number: a server shown a
// second epoch 1 that verifies — the CA's signature and q endorsements,
// here by signing keys, as on a cluster made before change 64 whose keys
// leaked — serves neither from then on: a client's request gets both
// epochs and ErrCodeEpochConflict, a peer that speaks to it is shown both
// (and finds the conflict itself), no vote is cast, and a restart keeps
// it so. A second epoch 1 that does not verify changes nothing.
func TestAServerShownTwoEpochsOfANumberServesNeither(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	w := c.newClient()
	one := c.epochOne(ca)
	for s := range 4 {
		c.fromServer(s, 3, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{one})})
	}
	c.drop()
	c.fromClient(1, w.id, &wire.Message{SessionOpen: &wire.SessionOpen{Session: 1, TTLMillis: 1000, Epoch: 1}})
	c.replies(w.id)

	other := c.epochOne(ca) // another server 4: another epoch 1, endorsed by servers 0–2
	half := wire.Epoch{Signed: other.Signed, Endorsements: other.Endorsements[:2]}
	c.fromServer(0, 3, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{half})})
	require.False(t, c.cores[0].conflicted(), "two endorsements of q prove nothing")

	c.fromServer(0, 3, &wire.Message{EpochNews: wire.NewsOf([]wire.Epoch{other})})
	require.True(t, c.cores[0].conflicted())
	require.Contains(t, c.disks[0][bucketConflict], string(conflictKey), "the proof is on disk")
	c.drop()
	c.fromClient(0, w.id, &wire.Message{Read: &wire.Read{Req: 7, Lock: "L", Epoch: 1}})
	got := c.replies(w.id)
	require.Len(t, got, 2)
	require.Len(t, got[0].EpochNews.Epochs, 2, "both epochs")
	require.Equal(t, []wire.ErrorCode{wire.ErrCodeEpochConflict}, errorCodes(got[1:]))

	c.fromServer(0, 1, &wire.Message{Announce: &wire.Announce{}})
	require.Len(t, c.inflight, 1, "the peer is shown both epochs")
	c.flush()
	require.True(t, c.cores[1].conflicted(), "and finds the conflict itself")

	c.now = c.now.Add(time.Minute)
	c.tick(0)
	for _, s := range []int{0, 1} {
		require.Zero(t, c.cores[s].Stats.VotesCast, "s%d casts no vote: its client's lease ran out, but it serves neither epoch", s)
	}
	c.restart(0)
	require.True(t, c.cores[0].conflicted(), "after a restart too")
}

// docs/protocol.md change 64: a member restarted after it endorsed an epoch
// — the proposal it gathered lost with its memory, its key of that epoch
// destroyed — shows the endorsement it made, kept on disk, when the
// proposal comes again. Found by the campaign's regression replays (seeds
// 5000057, 6012409, 3000190 made none of their changes): every member that
// restarted after endorsing refused the proposal for good, "no endorsement
// key", and the change never reached q.
func TestARestartedMemberShowsTheEndorsementItMade(t *testing.T) {
	c := newCluster(t, 4, 1)
	ca := c.withCA()
	c.withEndorsers()
	op := c.newClient()
	p := c.proposeOneWithKeys(ca)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	first := c.replies(op.id)
	require.Len(t, first, 1)
	c.drop()

	c.restart(0)
	c.fromClient(0, op.id, &wire.Message{Endorse: &wire.Endorse{Proposal: p}})
	again := c.replies(op.id)
	require.Len(t, again, 1)
	require.Empty(t, errorsIn(again), "it endorses again after a restart")
	require.Len(t, again[0].Endorse.Endorsements, 1)
	require.Equal(t, first[0].Endorse.Endorsements[0], again[0].Endorse.Endorsements[0], "the same endorsement, from its disk")
}
