package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Config configures one server's core.
type Config struct {
	Self   wire.ServerID
	N, F   int
	Keys   wire.Keyring
	Signer *crypto.PrivateKey
	// MaxPushes is T: the pushes one subscription gets before it ends (§3).
	MaxPushes int
	// Lease bounds (§5).
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// DoorwayDeadline: a client in a Doorway longer than this is suspected (§5).
	DoorwayDeadline time.Duration
	// Bounds on what one client can make the server hold (§6).
	MaxSessionsPerClient int
	// MaxDeferredSessions: sessions of a client that ran out while an older
	// one lives (a detached holding), whose votes wait (change 18).
	MaxDeferredSessions int
	MaxLocksPerClient   int
	MaxListenMembers    int
	// MaxLockMembers bounds a lock's active set (change 25); both it and
	// MaxListenMembers are lowered to what fits in one frame (memberFit).
	MaxLockMembers int
	// Rates of one identity (change 25): requests per second, with a
	// burst, and new lock names per minute.
	ClientRate        float64
	ClientBurst       int
	NewLocksPerMinute int
	// MaxLocks bounds the locks in use at this server (change 25).
	MaxLocks int
	// MaxBans bounds the bans kept for clients this server knows nothing
	// else of, from other servers' evidence (change 25).
	MaxBans int
	// MaxStateBytes bounds the live state: registers and justifications
	// (change 25).
	MaxStateBytes int
	// MaxHold is the max-hold of a client whose certificate names none
	// (change 24); zero is no bound.
	MaxHold time.Duration
	// ClientCA is the client CA of a closed cluster (change 23), which signs
	// revocations; nil for an open one.
	ClientCA *crypto.Parsed
	// Approver is the operator's approval key of an open cluster (the
	// cluster file's approver, change 65): this server endorses an epoch
	// only with the approval of the approvers in force — the newest epoch's
	// that names any, else this one. Nil on a closed cluster, whose client
	// CAs in force approve, and on an open cluster made before change 65,
	// whose members endorse what the cluster CA signed (unless an epoch
	// names approvers).
	Approver *crypto.Parsed
	// ClusterCA is the key of the cluster CA of epoch 0, which signs epoch
	// 1 (change 43); nil: this server adopts no epoch (an EpochNews is
	// ignored), and Keys must be of epoch 0.
	ClusterCA *crypto.Parsed
	// Endorser is this server's endorsement keys (docs/protocol.md change
	// 64): it endorses epoch N with its key for N alone, which it destroys
	// then. Nil: it endorses with its signing key (a member of a cluster
	// made before change 64). New copies it; the state persisted in
	// BucketEndorseKey, if any, replaces its state at Restore.
	Endorser *wire.Endorser
	// Epochs are epochs after 0 this server starts knowing (a member added
	// by server add or replace is given them with its material); with
	// ClusterCA only. Self must be a member of epoch 0 or of the newest.
	Epochs []wire.Epoch
	// VerifyCacheSize bounds the cache of verified statements.
	VerifyCacheSize int
	// AnnounceDelay is how long a newly accepted statement waits before it
	// is announced to the other servers (§3.5, lazy dissemination): the
	// statements accepted meanwhile go in one Announce per server. Zero
	// announces at the next Tick.
	AnnounceDelay time.Duration
	// FrozenGrace is how old this server's own vote on a session must be
	// before the session's member stops holding Listens here (change 42):
	// the certificate that the other servers' votes make within it resets
	// the member instead, which tells its waiters it is gone (change 45).
	// Zero: at once, as before change 45.
	FrozenGrace time.Duration
	// CopyPartBytes is the budget of one copy part's entries (zero:
	// copyPartBytes, a quarter of a frame). The simulator lowers it so that
	// a copy comes in several parts (issue 54, item 5: a copier counts a
	// member's state only once its last part came).
	CopyPartBytes int
}

// DefaultConfig returns production defaults for server self of an (n, f) cluster.
func DefaultConfig(self wire.ServerID, n, f int, keys wire.Keyring, signer *crypto.PrivateKey) Config {
	return Config{
		Self: self, N: n, F: f, Keys: keys, Signer: signer,
		MaxPushes:  256,
		DefaultTTL: 10 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 5 * time.Minute,
		DoorwayDeadline:      10 * time.Second,
		MaxSessionsPerClient: 4,
		MaxDeferredSessions:  64, // a TTL's worth of short processes of one identity behind a copied session (change 43)
		MaxLocksPerClient:    1024,
		MaxListenMembers:     4096,
		MaxLockMembers:       1024,
		ClientRate:           1000,
		ClientBurst:          2000,
		NewLocksPerMinute:    600,
		MaxLocks:             100_000,
		MaxBans:              65_536,
		MaxStateBytes:        1 << 30,
		VerifyCacheSize:      1 << 16,
		AnnounceDelay:        20 * time.Millisecond,
		FrozenGrace:          250 * time.Millisecond,
	}
}

// Validate reports every problem with the configuration, one error each.
func (c *Config) Validate() error {
	var errs []error
	if err := quorum.Check(c.N, c.F); err != nil {
		errs = append(errs, err)
	}
	if c.Keys.Len() != c.N {
		errs = append(errs, fmt.Errorf("core: %d server keys for n=%d", c.Keys.Len(), c.N))
	}
	if int(c.Self) >= c.N && len(c.Epochs) == 0 {
		errs = append(errs, fmt.Errorf("core: self %s is not a server of n=%d", c.Self, c.N))
	}
	if len(c.Epochs) > 0 && c.ClusterCA == nil {
		errs = append(errs, errors.New("core: epochs without the cluster CA to verify them"))
	}
	if c.Signer == nil {
		errs = append(errs, errors.New("core: no signing key"))
	} else if c.Keys.Key(c.Self) != nil && c.Keys.Key(c.Self).ID != c.Signer.Public.ID {
		errs = append(errs, errors.New("core: the signing key is not this server's key in the cluster file"))
	}
	if c.ClusterCA != nil && c.Keys.Epoch != 0 {
		errs = append(errs, fmt.Errorf("core: keys of epoch %d: a server starts in epoch 0 and adopts later epochs from its disk or its peers", c.Keys.Epoch))
	}
	if c.AnnounceDelay < 0 || c.FrozenGrace < 0 {
		errs = append(errs, errors.New("core: AnnounceDelay and FrozenGrace must be ≥ 0"))
	}
	if c.MaxPushes < 1 || c.MaxLocksPerClient < 1 || c.MaxListenMembers < 1 || c.MaxLockMembers < 1 || c.VerifyCacheSize < 1 {
		errs = append(errs, errors.New("core: MaxPushes, MaxLocksPerClient, MaxListenMembers, MaxLockMembers and VerifyCacheSize must be ≥ 1"))
	}
	if !(c.ClientRate > 0) || c.ClientBurst < 1 || c.NewLocksPerMinute < 1 || c.MaxLocks < 1 || c.MaxBans < 1 || c.MaxStateBytes < 1 {
		errs = append(errs, errors.New("core: ClientRate, ClientBurst, NewLocksPerMinute, MaxLocks, MaxBans and MaxStateBytes must be ≥ 1"))
	}
	return errors.Join(errs...)
}
