package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Backoff bounds for polling conditions nothing can watch (a referenced NAD in another
// namespace, a device-plugin resource appearing on some node).
const (
	minRetry = 2 * time.Second
	maxRetry = 5 * time.Minute
)

// event is queued during reconcile and emitted only after the status write succeeded, so users
// never see an Event about a state the API does not show.
type event struct {
	eventType, reason, message string
}

// statusUpdate accumulates the new status of one job during one reconcile.
type statusUpdate struct {
	status       *nezhav1.MultiRailJobStatus
	generation   int64
	now          metav1.Time
	events       []event
	actionEvents []event
	// prevDown are the (rail, node) pairs the last written status recorded as down; down the
	// pairs this reconcile finds down (nil until rail health was assessed).
	prevDown map[railPair]bool
	down     map[railPair]string
}

// setCondition sets a condition and, when its status or reason changed and eventType is not
// empty, queues an Event with the same reason and message.
func (s *statusUpdate) setCondition(condType string, status metav1.ConditionStatus, reason, message, eventType string) {
	old := meta.FindStatusCondition(s.status.Conditions, condType)
	changed := old == nil || old.Status != status || old.Reason != reason
	meta.SetStatusCondition(&s.status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: s.generation, LastTransitionTime: s.now,
	})
	if changed && eventType != "" {
		s.event(eventType, reason, message)
	}
}

func (s *statusUpdate) event(eventType, reason, message string) {
	s.events = append(s.events, event{eventType, reason, message})
}

// actionEvent queues an Event about something already done to the job's children (pods
// deleted, say). Unlike status Events it is emitted even when the status write then conflicts:
// the action happened, and the retry will not do it, nor announce it, again.
func (s *statusUpdate) actionEvent(eventType, reason, message string) {
	s.actionEvents = append(s.actionEvents, event{eventType, reason, message})
}

func (s *statusUpdate) isTrue(condType string) bool {
	return meta.IsStatusConditionTrue(s.status.Conditions, condType)
}

func (s *statusUpdate) reasonOf(condType string) string {
	if c := meta.FindStatusCondition(s.status.Conditions, condType); c != nil {
		return c.Reason
	}
	return ""
}

// retryAfter backs off polling exponentially without keeping state: the wait grows with the
// time the condition has already been in its current state (so each retry roughly doubles it).
func (s *statusUpdate) retryAfter(condType string) time.Duration {
	c := meta.FindStatusCondition(s.status.Conditions, condType)
	if c == nil {
		return minRetry
	}
	return min(max(s.now.Sub(c.LastTransitionTime.Time), minRetry), maxRetry)
}

var (
	warning = corev1.EventTypeWarning
	normal  = corev1.EventTypeNormal
)
