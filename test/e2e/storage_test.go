//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestStorageTables checks `kubectl get pv,pvc,sc` and `kubectl describe pvc` read as they do
// against Kubernetes: the columns, the "(default)" class, a claim given the default class, and
// 422 for an invalid volume.
func TestStorageTables(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	class, volume := k.ns+"-class", k.ns+"-pv"
	k.okIn(fmt.Sprintf(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %[1]s
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: example.com/disk
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[2]s
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  storageClassName: %[1]s
  hostPath: {path: /tmp/%[2]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, class, volume), "apply", "-f", "-")
	defer kc{t: t}.ok("delete", "storageclass/"+class, "persistentvolume/"+volume, "--wait=false")

	pvs := parseTable(t, kc{t: t}.ok("get", "pv", volume, "-o", "wide"))
	expectHeader(t, "get pv", pvs, "NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS",
		"VOLUMEATTRIBUTESCLASS", "REASON", "AGE", "VOLUMEMODE")
	row := pvs.row(t, volume)
	for col, want := range map[string]string{"CAPACITY": "2Gi", "ACCESS MODES": "RWO,ROX", "RECLAIM POLICY": "Retain",
		"STATUS": "Pending", "STORAGECLASS": class, "VOLUMEATTRIBUTESCLASS": "<unset>", "VOLUMEMODE": "Filesystem"} {
		if row[col] != want {
			t.Errorf("pv %s = %q, want %q", col, row[col], want)
		}
	}

	pvcs := parseTable(t, k.ok("get", "pvc"))
	expectHeader(t, "get pvc", pvcs, "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE")
	if row := pvcs.row(t, "data"); row["STATUS"] != "Pending" || row["STORAGECLASS"] != class {
		t.Errorf("pvc row %v", row)
	}

	classes := parseTable(t, kc{t: t}.ok("get", "sc", class))
	expectHeader(t, "get sc", classes, "NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE")
	row = classes.row(t, class+" (default)")
	if row["PROVISIONER"] != "example.com/disk" || row["RECLAIMPOLICY"] != "Delete" || row["VOLUMEBINDINGMODE"] != "WaitForFirstConsumer" || row["ALLOWVOLUMEEXPANSION"] != "false" {
		t.Errorf("sc row %v", row)
	}

	expectMatch(t, "describe pvc", k.ok("describe", "pvc", "data"),
		`StorageClass:\s+`+class, `Status:\s+Pending`, `Finalizers:\s+\[kubernetes.io/pvc-protection\]`, `VolumeMode:\s+Filesystem`)

	expectContains(t, "explain", k.ok("explain", "pvc.spec.storageClassName"), "KIND:       PersistentVolumeClaim", "storageClassName")
	expectContains(t, "explain", k.ok("explain", "storageclass.volumeBindingMode"), "GROUP:      storage.k8s.io", "volumeBindingMode")

	r := k.failIn("apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: "+k.ns+"-bad\nspec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n",
		"create", "-f", "-", "-v=6")
	expectContains(t, "stderr", r.stderr, `PersistentVolume "`+k.ns+`-bad" is invalid`, "spec: Required value: must specify a volume type", "422 Unprocessable Entity")
	if out := k.ok("get", "pv", "-o", "name"); strings.Contains(out, k.ns+"-bad") {
		t.Errorf("the invalid volume was stored: %s", out)
	}
}
