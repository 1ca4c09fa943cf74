// Package builder constructs the objects the operator owns for a MultiRailJob (Secret, headless
// Service, NetworkAttachmentDefinitions, worker pods, PyTorchJob) as pure functions of the job and
// its resolved rails, so each can be tested without a client.
package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// maxNameLength is the DNS-1123 subdomain limit for object names.
const maxNameLength = 253

// SecretName is the name of the job's runtime token Secret.
func SecretName(job string) string { return job + "-token" }

// ServiceName is the name of the job's headless Service; it is also the pods' subdomain.
func ServiceName(job string) string { return job }

// PodName is the name (and hostname) of worker rank. Job names are at most 57 characters (CRD
// rule), so "<job>-<rank>" stays a valid 63-character hostname.
func PodName(job string, rank int32) string { return job + "-" + strconv.Itoa(int(rank)) }

// PodFQDN is the stable DNS name of a worker through the headless Service.
func PodFQDN(job, namespace string, rank int32) string {
	return fmt.Sprintf("%s.%s.%s.svc", PodName(job, rank), ServiceName(job), namespace)
}

// RendezvousAddress is rank 0's rendezvous endpoint.
func RendezvousAddress(job, namespace string, port int32) string {
	return fmt.Sprintf("%s:%d", PodFQDN(job, namespace, 0), port)
}

// PyTorchMasterAddress is the rendezvous endpoint of a PyTorchJob's master (the training
// operator gives replica i of type Master the Service "<job>-master-<i>").
func PyTorchMasterAddress(job, namespace string, port int32) string {
	return fmt.Sprintf("%s-master-0.%s.svc:%d", job, namespace, port)
}

// NADName is the NetworkAttachmentDefinition the operator creates for rail in the job's
// namespace. Long names are cut and suffixed with a hash so different rails never collide.
func NADName(job, rail string) string {
	name := job + "-" + rail
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:10]
	return name[:maxNameLength-len(suffix)-1] + "-" + suffix
}

// InterfaceName is the pod interface of rail index i: "nz0", "nz1", ...
func InterfaceName(i int) string { return nezhav1.RailInterfacePrefix + strconv.Itoa(i) }
