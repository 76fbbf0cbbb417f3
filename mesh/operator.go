package mesh

import (
	"crypto/hmac"
	"crypto/sha256"
)

// An operator's request to a node over HTTP (dssp revoke) is authenticated
// by the mesh key: an HMAC-SHA256, under a key HKDF derives from the mesh
// key (info infoOperator), of "dssp operator v1", the operation and its
// argument, each followed by a zero byte. Whoever holds the mesh key is
// the mesh's operator. A recorded request can be replayed only as the
// same operation on the same argument (a revocation, which is
// idempotent). OperatorMAC authenticates op(arg) with k.
func (k MeshKey) OperatorMAC(op, arg string) []byte {
	return operatorMAC(k.derive(infoOperator, 32), op, arg)
}

func operatorMAC(key []byte, op, arg string) []byte {
	m := hmac.New(sha256.New, key)
	for _, s := range []string{"dssp operator v1", op, arg} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// VerifyOperator reports whether mac authenticates op(arg) under this
// mesh's key. Under InsecureSecurity, which has no key, it accepts any
// request: anyone who reaches such a node may do anything.
func (s *Security) VerifyOperator(op, arg string, mac []byte) bool {
	if s.insecure {
		return true
	}
	return len(s.opKey) > 0 && hmac.Equal(operatorMAC(s.opKey, op, arg), mac)
}
