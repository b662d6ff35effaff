// Package certs makes and loads a cluster's identities (docs/protocol.md §1): the
// cluster CA, each server's TLS certificate and protocol signing key, and the
// public cluster file that lists them.
//
// A cluster directory, as Init (and "bqserver init") makes it:
//
//	DIR/cluster.yaml          public: name, n, f, quorum, scheme, CA certificate,
//	                          and per server: id, address, signing key, certificate
//	DIR/server-<id>/          private, 0700; copy only to server <id>'s machine
//	    tls.key               TLS private key, PKCS#8 PEM, 0600
//	    tls.crt               TLS certificate (a copy of the cluster file's), 0600
//	    signing.key           PEM "BQ SIGNING KEY", header "Scheme", body the seed, 0600
//	DIR/ca/ca.key             cluster CA private key, 0600; only needed to add
//	                          servers, so keep it offline
//	DIR/ca/client-ca.key      a closed cluster's client CA key, 0600: the
//	                          operator's secret; its public key is the cluster
//	                          file's client_ca (docs/protocol.md change 23)
//	DIR/ca/operator.key       an open cluster's operator key, 0600: approves
//	                          every change of the members; its public key is
//	                          the cluster file's approver (docs/protocol.md
//	                          change 65); keep it apart from ca.key
//	DIR/clients/NAME.cert     the operator's record of enrolled clients
//	DIR/clients/NAME.revoked  and of revoked ones (ClientCA)
//
// What callers do, in order:
//   - an operator runs Init once; it never overwrites an existing cluster;
//   - a server calls LoadServer(DIR, id) at start-up and refuses to start on
//     error: it gets the Cluster, its TLS certificate and its signing key;
//   - clients and tools call LoadCluster(DIR/cluster.yaml);
//   - peers are identified by ServerByCert (the exact certificate of the
//     cluster file, not merely one the CA issued), and their signatures are
//     verified with Keyring.
//
// Loading checks everything and reports one error per problem (joined with
// errors.Join), each naming the file and field and saying what to do: a hand
// edit or a mix-up of files from two clusters is refused before a server
// starts, never discovered as a failed handshake later.
package certs
