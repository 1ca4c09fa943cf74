package quarantine

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// EvidenceAnnotation holds the operator's per-rail failure evidence on a RailNode (JSON).
const EvidenceAnnotation = "nezha.io/rail-evidence"

// maxEvidencePerRail bounds the annotation: more failures than this within a window change nothing.
const maxEvidencePerRail = 32

// Evidence is one rail's record in the annotation.
type Evidence struct {
	// Failures are the agent's lastTransitionTimes of the rail's failures within the window.
	Failures []metav1.Time `json:"failures,omitempty"`
	// LastFailure is the latest failure, kept after it leaves the window: a quarantined rail is
	// released only ReleaseAfter after it.
	LastFailure *metav1.Time `json:"lastFailure,omitempty"`
	// QuarantinedAt is set while the operator (not an admin) holds the rail in quarantine.
	QuarantinedAt *metav1.Time `json:"quarantinedAt,omitempty"`
}

// Parse reads the annotation; a missing one is empty evidence.
func Parse(rn *nezhav1.RailNode) (map[string]*Evidence, error) {
	ev := map[string]*Evidence{}
	raw, ok := rn.Annotations[EvidenceAnnotation]
	if !ok || raw == "" {
		return ev, nil
	}
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		return map[string]*Evidence{}, fmt.Errorf("annotation %s: %w", EvidenceAnnotation, err)
	}
	for rail, e := range ev {
		if e == nil {
			return map[string]*Evidence{}, fmt.Errorf("annotation %s: rail %q: null record", EvidenceAnnotation, rail)
		}
	}
	return ev, nil
}

// Encode writes ev back into rn's annotations (removing the annotation when empty).
func Encode(rn *nezhav1.RailNode, ev map[string]*Evidence) error {
	if len(ev) == 0 {
		delete(rn.Annotations, EvidenceAnnotation)
		return nil
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if rn.Annotations == nil {
		rn.Annotations = map[string]string{}
	}
	rn.Annotations[EvidenceAnnotation] = string(raw)
	return nil
}
