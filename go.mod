module github.com/bq-lock/bq

go 1.26.0

require (
	github.com/cloudflare/circl v1.6.5
	github.com/fxamacker/cbor/v2 v2.9.6
)

require (
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
