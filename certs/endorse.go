package certs

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bq-lock/bq/wire"
)

// A member's endorsement keys (docs/protocol.md change 64): the public part
// — every one-time key, endorse.pub — and the secret part — the first key
// not yet destroyed and its seed, endorse.key — in the member's private
// directory; the epoch that brings the member in (the cluster file for the
// first members) names their root. The member destroys the key of each
// epoch it endorses or holds by overwriting endorse.key in place.
const (
	EndorseKeyFile    = "endorse.key" // secret: the state (wire.Endorser.State), overwritten in place
	EndorseLeavesFile = "endorse.pub" // public: every leaf's key, 32 bytes each
)

// formatEndorseKeys is the cluster file's form of a member's endorsement
// keys: "first=F count=C root=HEX".
func formatEndorseKeys(k *wire.EndorseKeys) string {
	return fmt.Sprintf("first=%d count=%d root=%s", k.First, k.Count, hex.EncodeToString(k.Root[:]))
}

// parseEndorseKeys reads formatEndorseKeys' form.
func parseEndorseKeys(s string) (*wire.EndorseKeys, error) {
	var k wire.EndorseKeys
	seen := map[string]bool{}
	for _, f := range strings.Fields(s) {
		name, v, ok := strings.Cut(f, "=")
		if !ok || seen[name] {
			return nil, fmt.Errorf("%q: want first=F count=C root=HEX", s)
		}
		seen[name] = true
		var err error
		switch name {
		case "first":
			k.First, err = strconv.ParseUint(v, 10, 64)
		case "count":
			var c uint64
			c, err = strconv.ParseUint(v, 10, 32)
			k.Count = uint32(c)
		case "root":
			var b []byte
			if b, err = hex.DecodeString(v); err == nil && len(b) != 32 {
				err = errors.New("32 bytes")
			}
			copy(k.Root[:], b)
		default:
			return nil, fmt.Errorf("%q: unknown field %q (want first=F count=C root=HEX)", s, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %s: %v", s, name, err)
		}
	}
	if len(seen) != 3 {
		return nil, fmt.Errorf("%q: want first=F count=C root=HEX", s)
	}
	if err := k.Check(); err != nil {
		return nil, fmt.Errorf("%q: %v", s, err)
	}
	return &k, nil
}

// newEndorser makes the endorsement keys of a member whose first endorsed
// epoch is first.
func newEndorser(rand io.Reader, first uint64) (*wire.Endorser, error) {
	en, err := wire.NewEndorser(rand, first, wire.DefaultEndorseLeaves)
	if err != nil {
		return nil, fmt.Errorf("certs: making endorsement keys: %w", err)
	}
	return en, nil
}

// loadEndorser reads the endorsement keys in a member's private directory
// sdir, checked against what its epoch names (keys).
func loadEndorser(sdir string, keys *wire.EndorseKeys) (*wire.Endorser, error) {
	statePath, leavesPath := filepath.Join(sdir, EndorseKeyFile), filepath.Join(sdir, EndorseLeavesFile)
	state, err := readPrivate(statePath, true)
	if err != nil {
		return nil, err
	}
	leaves, err := readLimited(leavesPath, 32*wire.MaxEndorseLeaves)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("certs: %s is missing: it holds this server's public endorsement keys, made with its other files", leavesPath)
		}
		return nil, fmt.Errorf("certs: %w", err)
	}
	en, err := wire.LoadEndorser(*keys, leaves, state)
	if err != nil {
		return nil, fmt.Errorf("certs: %s, %s: %w (use the files made for this server of this cluster)", statePath, leavesPath, err)
	}
	return en, nil
}

// LoadMemberEndorser reads server id's endorsement keys from its private
// directory in the cluster directory dir, checked against keys (what its
// epoch names).
func LoadMemberEndorser(dir string, id wire.ServerID, keys *wire.EndorseKeys) (*wire.Endorser, error) {
	return loadEndorser(ServerDir(dir, int(id)), keys)
}

// EndorseKeyStore writes a member's endorsement key state over its file in
// place, and syncs it: the seed of a destroyed key is overwritten where it
// was, not left in a free page or an old file (docs/protocol.md change 64).
// The state has a fixed size. Storage that remaps writes (flash, copy-on-
// write file systems) may keep the old bytes: the runbook says to destroy a
// removed member's disk.
type EndorseKeyStore struct{ path string }

// NewEndorseKeyStore is the store of the state file in sdir.
func NewEndorseKeyStore(sdir string) *EndorseKeyStore {
	return &EndorseKeyStore{path: filepath.Join(sdir, EndorseKeyFile)}
}

// Write overwrites the state with b, in place, and syncs it.
func (s *EndorseKeyStore) Write(b []byte) error {
	f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("certs: endorsement keys: %w", err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return fmt.Errorf("certs: endorsement keys: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("certs: endorsement keys: %w", err)
	}
	return f.Close()
}
