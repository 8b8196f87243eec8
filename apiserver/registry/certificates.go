package registry

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/apiserver/authentication"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// certificates.k8s.io/v1: CertificateSigningRequests are stored and validated (the request
// must be a signed PKCS#10 PEM block, the signer a domain-qualified name, the usages known),
// their requester is recorded from the request's user, and approval and issuing go through
// their own subresources (approval, status) as in Kubernetes. No kplane controller approves,
// signs or cleans them up yet: a request stays Pending until a client approves it and
// something outside kplane writes the certificate. v1.36 serves ClusterTrustBundles and
// PodCertificateRequests only behind feature gates that are off by default, so kplane does not.

var certificatesV1 = certificatesv1.SchemeGroupVersion

var certificateSigningRequests = &Def[*certificatesv1.CertificateSigningRequest]{
	Info: Info{GroupVersion: certificatesV1, Resource: "certificatesigningrequests", Singular: "certificatesigningrequest",
		Kind: "CertificateSigningRequest", ShortNames: []string{"csr"}, Status: true, Approval: true},
	NewList:           func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} },
	NameValidation:    path.ValidatePathSegmentName,
	CreateFromRequest: recordRequester,
	// The spec is what was asked for, by whom: fixed once created.
	KeepOnUpdate:    func(csr, old *certificatesv1.CertificateSigningRequest) { csr.Spec = old.Spec },
	PrepareStatus:   prepareCSRStatus,
	PrepareApproval: prepareCSRApproval,
	ValidateCreate: func(csr *certificatesv1.CertificateSigningRequest) field.ErrorList {
		return append(validateCSRSpec(&csr.Spec), validateCSRStatus(&csr.Status, nil)...)
	},
	ValidateUpdate:      validateCSRUpdate,
	ValidateSubresource: validateCSRSubresource,
	Fields: func(csr *certificatesv1.CertificateSigningRequest) fields.Set {
		return fields.Set{"spec.signerName": csr.Spec.SignerName}
	},
	Columns: columns(
		AgeColumn,
		Column("SignerName", "string", 0, "The signer the request asks for."),
		Column("Requestor", "string", 0, "The user who created the request."),
		Column("RequestedDuration", "string", 0, "The validity the request asks for."),
		Column("Condition", "string", 0, "Conditions applied to the request, such as approval or denial."),
	),
	Row: func(csr *certificatesv1.CertificateSigningRequest) []any {
		requested := "<none>"
		if s := csr.Spec.ExpirationSeconds; s != nil {
			requested = duration.HumanDuration(time.Duration(*s) * time.Second)
		}
		return []any{Age(csr.CreationTimestamp), or(csr.Spec.SignerName, "<none>"), csr.Spec.Username, requested, csrCondition(csr)}
	},
}

// recordRequester replaces whatever the client claims about the requester with who it is.
func recordRequester(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) {
	s := &csr.Spec
	s.Username, s.UID, s.Groups, s.Extra = "", "", nil, nil
	user, ok := authentication.UserFrom(ctx)
	if !ok {
		return
	}
	s.Username, s.UID, s.Groups = user.Username, user.UID, user.Groups
	if len(user.Extra) > 0 {
		s.Extra = map[string]certificatesv1.ExtraValue{}
		for k, v := range user.Extra {
			s.Extra[k] = certificatesv1.ExtraValue(v)
		}
	}
}

// csrCondition is the Condition cell: the decision, then whether signing failed or a
// certificate was issued.
func csrCondition(csr *certificatesv1.CertificateSigningRequest) string {
	has := func(t certificatesv1.RequestConditionType) bool { return len(conditionsOf(csr, t)) > 0 }
	cell := "Pending"
	switch {
	case has(certificatesv1.CertificateDenied):
		cell = "Denied"
	case has(certificatesv1.CertificateApproved):
		cell = "Approved"
	}
	if has(certificatesv1.CertificateFailed) {
		cell += ",Failed"
	}
	if len(csr.Status.Certificate) > 0 {
		cell += ",Issued"
	}
	return cell
}

func conditionsOf(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) []certificatesv1.CertificateSigningRequestCondition {
	var out []certificatesv1.CertificateSigningRequestCondition
	for _, c := range csr.Status.Conditions {
		if c.Type == t {
			out = append(out, c)
		}
	}
	return out
}

// decisions are the condition types only the approval subresource adds or changes.
var decisions = []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied}

// prepareCSRStatus keeps the decisions of a status write (the signer's) as stored, when it
// carries as many of them as there are; adding or dropping one is refused by validation.
func prepareCSRStatus(csr, old *certificatesv1.CertificateSigningRequest) {
	for _, t := range decisions {
		var at []int
		for i, c := range csr.Status.Conditions {
			if c.Type == t {
				at = append(at, i)
			}
		}
		was := conditionsOf(old, t)
		if len(at) == len(was) {
			for j, i := range at {
				csr.Status.Conditions[i] = was[j]
			}
		}
	}
	stampConditions(csr, old)
}

// prepareCSRApproval takes only the conditions from an approval write.
func prepareCSRApproval(csr, old *certificatesv1.CertificateSigningRequest) {
	stampConditions(csr, old)
	conditions := csr.Status.Conditions
	csr.Status = old.Status
	csr.Status.Conditions = conditions
}

// stampConditions fills the times a writer left out: updated now, and transitioned now unless
// the stored condition of that type already had this status.
func stampConditions(csr, old *certificatesv1.CertificateSigningRequest) {
	now := metav1.Now()
	for i := range csr.Status.Conditions {
		c := &csr.Status.Conditions[i]
		if c.LastUpdateTime.IsZero() {
			c.LastUpdateTime = now
		}
		if !c.LastTransitionTime.IsZero() {
			continue
		}
		c.LastTransitionTime = now
		for _, o := range old.Status.Conditions {
			if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
				c.LastTransitionTime = o.LastTransitionTime
				break
			}
		}
	}
}

var keyUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageSigning, certificatesv1.UsageDigitalSignature, certificatesv1.UsageContentCommitment,
	certificatesv1.UsageKeyEncipherment, certificatesv1.UsageKeyAgreement, certificatesv1.UsageDataEncipherment,
	certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageEncipherOnly,
	certificatesv1.UsageDecipherOnly, certificatesv1.UsageAny, certificatesv1.UsageServerAuth,
	certificatesv1.UsageClientAuth, certificatesv1.UsageCodeSigning, certificatesv1.UsageEmailProtection,
	certificatesv1.UsageSMIME, certificatesv1.UsageIPsecEndSystem, certificatesv1.UsageIPsecTunnel,
	certificatesv1.UsageIPsecUser, certificatesv1.UsageTimestamping, certificatesv1.UsageOCSPSigning,
	certificatesv1.UsageMicrosoftSGC, certificatesv1.UsageNetscapeSGC,
}

// legacyUnknownSigner is the signer of requests made through v1beta1 without one; v1 may not
// ask for it.
const legacyUnknownSigner = "kubernetes.io/legacy-unknown"

func validateCSRSpec(s *certificatesv1.CertificateSigningRequestSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if err := checkCSRRequest(s.Request); err != nil {
		errs = append(errs, field.Invalid(p.Child("request"), s.Request, err.Error()))
	}
	if len(s.Usages) == 0 {
		errs = append(errs, field.Required(p.Child("usages"), ""))
	}
	for i, u := range s.Usages {
		if !slices.Contains(keyUsages, u) {
			errs = append(errs, field.NotSupported(p.Child("usages").Index(i), u, slices.Sorted(slices.Values(keyUsages))))
		}
	}
	seen := map[certificatesv1.KeyUsage]bool{}
	for i, u := range s.Usages {
		errs = append(errs, unique(seen, u, p.Child("usages").Index(i), u)...)
	}
	if s.SignerName == legacyUnknownSigner {
		errs = append(errs, field.Invalid(p.Child("signerName"), s.SignerName, "the legacy signerName is not allowed via this API version"))
	} else {
		errs = append(errs, signerName(s.SignerName, p.Child("signerName"))...)
	}
	if s.ExpirationSeconds != nil && *s.ExpirationSeconds < 600 {
		errs = append(errs, field.Invalid(p.Child("expirationSeconds"), *s.ExpirationSeconds, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	return errs
}

// checkCSRRequest parses a PEM CERTIFICATE REQUEST and checks its self-signature: the
// requester holds the key it asks a certificate for.
func checkCSRRequest(data []byte) error {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err
	}
	return req.CheckSignature()
}

// signerName checks a signer's name: a domain of at least two labels, a slash, and a path of
// DNS subdomains separated by dots ("example.com/my-signer").
func signerName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	domain, rest, ok := strings.Cut(name, "/")
	if !ok || strings.Contains(rest, "/") {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(p, "", validation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if bad := validation.IsDNS1123Label(l); len(bad) > 0 {
			for _, m := range bad {
				errs = append(errs, field.Invalid(p, domain, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break // the first bad label says enough
		}
	}
	if len(labels) < 2 {
		errs = append(errs, field.Invalid(p, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(rest, ".") {
		if bad := validation.IsDNS1123Subdomain(l); len(bad) > 0 {
			for _, m := range bad {
				errs = append(errs, field.Invalid(p, rest, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if max := 2*validation.DNS1123SubdomainMaxLength + validation.DNS1123LabelMaxLength + 2; len(name) > max {
		errs = append(errs, field.TooLong(p, "", max))
	}
	return errs
}

// onlyTrue are the condition types whose status may only be True.
var onlyTrue = []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed}

// validateCSRStatus checks the conditions (typed, a known status, Approved and Denied not
// both, one of each type) and the certificate (PEM CERTIFICATE blocks only). A stored request
// that already breaks a rule (written by an older server) may keep doing so: old is its status.
func validateCSRStatus(s, old *certificatesv1.CertificateSigningRequestStatus) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status", "conditions")
	lenient := func(check func(*certificatesv1.CertificateSigningRequestStatus) bool) bool {
		return old != nil && check(old)
	}
	seen := map[certificatesv1.RequestConditionType]bool{}
	approved, denied := false, false
	for i, c := range s.Conditions {
		if c.Type == "" && !lenient(hasUntypedCondition) {
			errs = append(errs, field.Required(p.Index(i).Child("type"), ""))
		}
		allowed := []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionUnknown}
		if slices.Contains(onlyTrue, c.Type) {
			allowed = []corev1.ConditionStatus{corev1.ConditionTrue}
		}
		switch {
		case c.Status == "":
			errs = append(errs, field.Required(p.Index(i).Child("status"), ""))
		case !slices.Contains(allowed, c.Status):
			errs = append(errs, field.NotSupported(p.Index(i).Child("status"), c.Status, allowed))
		}
		approved = approved || c.Type == certificatesv1.CertificateApproved
		denied = denied || c.Type == certificatesv1.CertificateDenied
		if approved && denied && (c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied) && !lenient(isApprovedAndDenied) {
			errs = append(errs, field.Invalid(p, c.Type, "Approved and Denied conditions are mutually exclusive"))
		}
		if seen[c.Type] && !lenient(hasRepeatedCondition) {
			errs = append(errs, field.Duplicate(p.Index(i).Child("type"), c.Type))
		}
		seen[c.Type] = true
	}
	if old == nil || !bytes.Equal(s.Certificate, old.Certificate) {
		if err := checkCertificates(s.Certificate); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("status", "certificate"), "<certificate data>", err.Error()))
		}
	}
	return errs
}

func hasUntypedCondition(s *certificatesv1.CertificateSigningRequestStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == "" {
			return true
		}
	}
	return false
}

func hasRepeatedCondition(s *certificatesv1.CertificateSigningRequestStatus) bool {
	seen := map[certificatesv1.RequestConditionType]bool{}
	for _, c := range s.Conditions {
		if seen[c.Type] {
			return true
		}
		seen[c.Type] = true
	}
	return false
}

func isApprovedAndDenied(s *certificatesv1.CertificateSigningRequestStatus) bool {
	csr := &certificatesv1.CertificateSigningRequest{Status: *s}
	return len(conditionsOf(csr, certificatesv1.CertificateApproved)) > 0 && len(conditionsOf(csr, certificatesv1.CertificateDenied)) > 0
}

// checkCertificates accepts nothing (not issued yet) or PEM CERTIFICATE blocks without
// headers, each holding a certificate.
func checkCertificates(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	blocks := 0
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) != 0 {
			return errors.New("no PEM block headers are permitted")
		}
		certs, err := x509.ParseCertificates(block.Bytes)
		if err != nil {
			return err
		}
		if len(certs) == 0 {
			return errors.New("found CERTIFICATE PEM block containing 0 certificates")
		}
		blocks++
		data = rest
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

// validateCSRUpdate: conditions that decide or fail a request are never removed, and an
// issued certificate is never replaced.
func validateCSRUpdate(csr, old *certificatesv1.CertificateSigningRequest) field.ErrorList {
	errs := validateCSRStatus(&csr.Status, &old.Status)
	p := field.NewPath("status", "conditions")
	for _, t := range onlyTrue {
		if len(conditionsOf(csr, t)) < len(conditionsOf(old, t)) {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if len(old.Status.Certificate) > 0 && !bytes.Equal(csr.Status.Certificate, old.Status.Certificate) {
		errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"), "updates may not modify existing certificate content"))
	}
	return errs
}

// validateCSRSubresource: only the approval subresource adds or changes a decision.
func validateCSRSubresource(csr, old *certificatesv1.CertificateSigningRequest, subresource string) field.ErrorList {
	if subresource != "status" {
		return nil
	}
	var errs field.ErrorList
	p := field.NewPath("status", "conditions")
	for _, t := range decisions {
		now, was := conditionsOf(csr, t), conditionsOf(old, t)
		switch {
		case len(now) < len(was): // reported by validateCSRUpdate
		case len(now) > len(was):
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not add a condition of type %q", t)))
		case !apiequality.Semantic.DeepEqual(now, was):
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not modify a condition of type %q", t)))
		}
	}
	return errs
}
