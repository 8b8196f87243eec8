package registry

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver/authentication"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testCSRPEM is a PEM certificate request for CN=alice, signed by its own key.
func testCSRPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// testCertPEM is a self-signed PEM certificate.
func testCertPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newCSR(t *testing.T, change func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
	csr := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: testCSRPEM(t), SignerName: "kubernetes.io/kube-apiserver-client",
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}}}
	if change != nil {
		change(csr)
	}
	return csr
}

func TestValidateCertificateSigningRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*certificatesv1.CertificateSigningRequest)
		want   []string
	}{
		{"valid", nil, nil},
		{"not a request", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") },
			[]string{"FieldValueInvalid spec.request"}},
		{"bad signature", func(c *certificatesv1.CertificateSigningRequest) {
			block, _ := pem.Decode(c.Spec.Request)
			block.Bytes[len(block.Bytes)-3] ^= 0xff
			c.Spec.Request = pem.EncodeToMemory(block)
		}, []string{"FieldValueInvalid spec.request"}},
		{"usages", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{"client auth", "client auth", "flying"}
		}, []string{"FieldValueDuplicate spec.usages[1]", "FieldValueNotSupported spec.usages[2]"}},
		{"no usages", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }, []string{"FieldValueRequired spec.usages"}},
		{"no signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "" }, []string{"FieldValueRequired spec.signerName"}},
		{"legacy signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" },
			[]string{"FieldValueInvalid spec.signerName"}},
		{"signer without path", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com" },
			[]string{"FieldValueInvalid spec.signerName"}},
		{"signer with a one-label domain", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example/signer" },
			[]string{"FieldValueInvalid spec.signerName"}},
		{"custom signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/my.signer" }, nil},
		{"too short", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = new(int32(599)) },
			[]string{"FieldValueInvalid spec.expirationSeconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr := newCSR(t, tc.change)
			certificateSigningRequests.PrepareCreate(csr)
			if got := errs(certificateSigningRequests.ValidateObject(csr, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestCSRRequester: who asked is the request's user, whatever the client wrote.
func TestCSRRequester(t *testing.T) {
	csr := newCSR(t, func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "mallory" })
	ctx := authentication.WithUser(context.Background(), authenticationv1.UserInfo{Username: "alice", UID: "1", Groups: []string{"devs"},
		Extra: map[string]authenticationv1.ExtraValue{"scope": {"x"}}})
	certificateSigningRequests.PrepareCreate(csr)
	certificateSigningRequests.PrepareCreateFromRequest(ctx, csr)
	s := csr.Spec
	if s.Username != "alice" || s.UID != "1" || !slices.Equal(s.Groups, []string{"devs"}) || !slices.Equal(s.Extra["scope"], certificatesv1.ExtraValue{"x"}) {
		t.Errorf("requester %q %q %q %v", s.Username, s.UID, s.Groups, s.Extra)
	}
}

func condition(t certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: "Test"}
}

// TestCSRWrites: the spec never changes; a decision comes through approval only; a
// certificate through status only, and once; conditions are stamped and never removed.
func TestCSRWrites(t *testing.T) {
	stored := newCSR(t, nil)
	certificateSigningRequests.PrepareCreate(stored)
	stored.ResourceVersion = "1"
	write := func(subresource string, change func(*certificatesv1.CertificateSigningRequest)) (*certificatesv1.CertificateSigningRequest, []string) {
		next := stored.DeepCopy()
		change(next)
		certificateSigningRequests.PrepareUpdate(next, stored, subresource)
		list := certificateSigningRequests.ValidateObject(next, stored)
		list = append(list, certificateSigningRequests.ValidateSubresourceWrite(next, stored, subresource)...)
		return next, errs(list)
	}
	approve := func(c *certificatesv1.CertificateSigningRequest) {
		c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateApproved))
	}

	if got, e := write("", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example.com/x"; approve(c) }); len(e) > 0 ||
		got.Spec.SignerName != stored.Spec.SignerName || len(got.Status.Conditions) != 0 {
		t.Errorf("a write of the object changed spec or status: %q %+v", e, got)
	}
	if _, e := write("status", approve); !slices.Equal(e, []string{"FieldValueForbidden status.conditions"}) {
		t.Errorf("status write adding Approved: %q", e)
	}
	approved, e := write("approval", func(c *certificatesv1.CertificateSigningRequest) { approve(c); c.Status.Certificate = testCertPEM(t) })
	if len(e) > 0 || len(approved.Status.Conditions) != 1 || approved.Status.Certificate != nil {
		t.Fatalf("approval: %q %+v", e, approved.Status)
	}
	if c := approved.Status.Conditions[0]; c.LastUpdateTime.IsZero() || c.LastTransitionTime.IsZero() {
		t.Errorf("approval not stamped: %+v", c)
	}
	stored = approved
	if _, e := write("approval", func(c *certificatesv1.CertificateSigningRequest) {
		c.Status.Conditions = append(c.Status.Conditions, condition(certificatesv1.CertificateDenied))
	}); !slices.Equal(e, []string{"FieldValueInvalid status.conditions"}) {
		t.Errorf("approved and denied: %q", e)
	}
	if _, e := write("approval", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Conditions = nil }); !slices.Equal(e, []string{"FieldValueForbidden status.conditions"}) {
		t.Errorf("decision removed: %q", e)
	}
	issued, e := write("status", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = testCertPEM(t) })
	if len(e) > 0 || len(issued.Status.Certificate) == 0 {
		t.Fatalf("issuing: %q", e)
	}
	if got := certificateSigningRequests.TableRow(issued); got[5] != "Approved,Issued" {
		t.Errorf("row %q", got)
	}
	stored = issued
	if _, e := write("status", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = testCertPEM(t) }); !slices.Equal(e, []string{"FieldValueForbidden status.certificate"}) {
		t.Errorf("certificate replaced: %q", e)
	}
	if _, e := write("status", func(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = []byte("junk") }); !slices.Contains(e, "FieldValueInvalid status.certificate") {
		t.Errorf("junk certificate: %q", e)
	}
}

func TestCSRRow(t *testing.T) {
	csr := newCSR(t, func(c *certificatesv1.CertificateSigningRequest) {
		c.Spec.Username, c.Spec.ExpirationSeconds = "alice", new(int32(86400))
		c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{condition(certificatesv1.CertificateDenied), condition(certificatesv1.CertificateFailed)}
	})
	want := []any{"alice", "<unknown>", "kubernetes.io/kube-apiserver-client", "alice", "24h", "Denied,Failed"}
	if got := certificateSigningRequests.TableRow(csr); !slices.Equal(got, want) {
		t.Errorf("row %q, want %q", got, want)
	}
	if got := certificateSigningRequests.SelectableFields(csr)["spec.signerName"]; got != "kubernetes.io/kube-apiserver-client" {
		t.Errorf("spec.signerName field %q", got)
	}
}
