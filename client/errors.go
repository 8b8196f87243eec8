package client

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The errors a request returns are *apierrors.StatusError carrying the server's metav1.Status;
// these predicates read them.

// IsNotFound reports a 404 NotFound.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// IsAlreadyExists reports a create of an existing name.
func IsAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// IsConflict reports a write against a stale resourceVersion (or a failed precondition).
func IsConflict(err error) bool { return apierrors.IsConflict(err) }

// IsInvalid reports a 422; Causes lists the fields.
func IsInvalid(err error) bool { return apierrors.IsInvalid(err) }

// IsExpired reports a resourceVersion or continue token too old to serve (410): relist.
func IsExpired(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

// IsTooManyRequests reports a 429 the client's retries did not get past.
func IsTooManyRequests(err error) bool { return apierrors.IsTooManyRequests(err) }

// Causes returns the field causes of a 422 (or of any error with details).
func Causes(err error) []metav1.StatusCause {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		return s.Status().Details.Causes
	}
	return nil
}
