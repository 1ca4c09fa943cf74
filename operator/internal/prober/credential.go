package prober

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// controlCredentialMessage is the HMAC message that derives the control credential from the job
// token (runtime/src/bootstrap/auth.cc controlCredential: the two must stay equal).
const controlCredentialMessage = "nezha/control/v1"

// ControlCredential is what the runtime's control endpoint wants after "Bearer " on a mutating
// request: lowercase hex of HMAC-SHA256(key = the job token exactly as in the Secret,
// message = "nezha/control/v1"). Derived, so the token itself never crosses the wire.
func ControlCredential(token []byte) string {
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte(controlCredentialMessage))
	return hex.EncodeToString(mac.Sum(nil))
}
