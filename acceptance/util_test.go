package acceptance

import (
	"bytes"
	"crypto/sha256"
	"io"
)

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

func ioNopCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
