package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The operator's approval key of an open cluster (docs/protocol.md change
// 65): `bqserver init --open` writes it to DIR/ca/operator.key and names its
// public half in the cluster file (approver); the change commands approve
// each proposal with it, as they approve a closed cluster's with the client
// CA's key, and `bqserver ca rotate-operator` puts a new one in its place.
// It is a secret apart from the cluster CA's key: the members endorse only
// what both signed, so neither alone changes or freezes the membership.

// OperatorKeyFile is an open cluster's operator approval key (PEM "BQ
// SIGNING KEY"), inside DIR/ca/.
const OperatorKeyFile = "operator.key"

// operatorNextKeyFile holds a rotation's next operator key until its epoch
// is written (Complete puts it in place of OperatorKeyFile).
const operatorNextKeyFile = "operator-next.key"

// ApproversIn are the operator's approval keys in force after the newest
// epoch of chain (change 65): none on a closed cluster (its client CAs in
// force approve) and none on an open cluster whose cluster file names no
// approver and no epoch since either (made before change 65: its members
// endorse what the cluster CA signed).
func (c *Cluster) ApproversIn(chain *wire.Chain) []*crypto.Parsed {
	if c.Closed() {
		return nil
	}
	return chain.Approvers(c.Approver)
}

// LoadOperatorKey reads the operator approval key in force of the open
// cluster in dir: DIR/ca/operator.key, or the key a rotation left beside
// it, whichever is an approver in force.
func LoadOperatorKey(dir string) (*crypto.PrivateKey, error) {
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	if err != nil {
		return nil, err
	}
	chain, _, err := c.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	return loadOperatorKey(dir, c, chain)
}

func loadOperatorKey(dir string, c *Cluster, chain *wire.Chain) (*crypto.PrivateKey, error) {
	if c.Closed() {
		return nil, fmt.Errorf("certs: the cluster in %s is closed: its changes are approved with the client CA's key (%s), not an operator key",
			dir, filepath.Join(dir, CADirName, ClientCAKeyFile))
	}
	inForce := c.ApproversIn(chain)
	if len(inForce) == 0 {
		return nil, fmt.Errorf("certs: the cluster file in %s names no approver (it was made before docs/protocol.md change 65): its members need no approval, and there is no operator key to use; make a new cluster with 'bqserver init --open' to get one", dir)
	}
	path := filepath.Join(dir, CADirName, OperatorKeyFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, nerr := os.Stat(filepath.Join(dir, CADirName, operatorNextKeyFile)); nerr != nil {
			return nil, fmt.Errorf("certs: %s is missing: the members of this open cluster endorse a change only with the operator's approval, signed with the operator key that 'bqserver init --open' wrote there (docs/protocol.md change 65); put it back from where you keep it, apart from ca.key", path)
		}
	}
	var errs []error
	for _, name := range []string{OperatorKeyFile, operatorNextKeyFile} {
		path := filepath.Join(dir, CADirName, name)
		if _, err := os.Stat(path); name == operatorNextKeyFile && err != nil {
			break
		}
		data, err := readPrivate(path, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k, err := parseSigningKey(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("certs: %s: %v", path, err))
			continue
		}
		for _, a := range inForce {
			if k.Public.ID == a.ID {
				return k, nil
			}
		}
		errs = append(errs, fmt.Errorf("certs: %s is not the key of an approver in force (the cluster file's approver, or the one the newest epoch naming one names)", path))
	}
	return nil, errors.Join(errs...)
}
