package prober

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// controlCredentialMessage is the HMAC message that derives the control credential from the job
// token (runtime/src/bootstrap/auth.cc controlCredential: the two must stay equal).
const controlCredentialMessage = "nezha/control/v1"

// ControlCredential is the key a mutating request to the runtime's control endpoint is signed
// with (http.go signs each request with it; it is never sent itself): lowercase hex of
// HMAC-SHA256(key = the job token exactly as in the Secret, message = "nezha/control/v1").
// Derived, so neither the token nor this credential crosses the wire.
func ControlCredential(token []byte) string {
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte(controlCredentialMessage))
	return hex.EncodeToString(mac.Sum(nil))
}
