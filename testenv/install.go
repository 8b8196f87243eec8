package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kplane/kplane/client"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifest is one object to create: its JSON as written and where it came from, for errors.
type manifest struct {
	source string
	meta   metav1.TypeMeta
	json   []byte
}

// The kinds Start installs, and where each is created.
var collections = map[string]string{
	"apiextensions.k8s.io/v1/CustomResourceDefinition":               "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
	"admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
	"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration":   "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
}

func collection(m manifest) string { return collections[m.meta.APIVersion+"/"+m.meta.Kind] }

// readManifests reads the documents of the given files and directories whose kind is one of
// kinds; others are skipped. A path that does not exist, a file that cannot be read and a
// document that does not parse are errors naming the file.
func readManifests(option string, paths []string, kinds ...string) ([]manifest, error) {
	var out []manifest
	for _, path := range paths {
		files, err := filesOf(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", option, err)
		}
		for _, file := range files {
			docs, err := readDocuments(file)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", option, file, err)
			}
			for _, m := range docs {
				if slices.Contains(kinds, m.meta.Kind) {
					out = append(out, m)
				}
			}
		}
	}
	return out, nil
}

// filesOf is path itself when it is a file, else its .yaml, .yml and .json files in name order.
func filesOf(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	return files, nil
}

// readDocuments splits file into its YAML (or JSON) documents.
func readDocuments(file string) ([]manifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []manifest
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		m := manifest{source: fmt.Sprintf("%s (document %d)", file, n), json: js}
		if err := json.Unmarshal(js, &m.meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if m.meta.Kind == "" {
			return nil, fmt.Errorf("document %d: no kind", n)
		}
		out = append(out, m)
	}
}

// stripComments drops YAML comment lines, so that a document of comments only counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
		}
	}
	return b.Bytes()
}

// objectManifests turns objects given in code into manifests, their apiVersion and kind set.
func objectManifests[T any](option, apiVersion, kind string, objs []T, name func(T) string) ([]manifest, error) {
	out := make([]manifest, 0, len(objs))
	for _, o := range objs {
		js, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", option, name(o), err)
		}
		// The Go types leave apiVersion and kind empty unless the caller set them.
		var fields map[string]any
		if err := json.Unmarshal(js, &fields); err != nil {
			return nil, err
		}
		fields["apiVersion"], fields["kind"] = apiVersion, kind
		if js, err = json.Marshal(fields); err != nil {
			return nil, err
		}
		out = append(out, manifest{source: option + " " + name(o), meta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, json: js})
	}
	return out, nil
}

// create creates every manifest, failing on the first the server refuses with its source and
// the server's message.
func create(ctx context.Context, c *client.Client, ms []manifest) error {
	for _, m := range ms {
		path := collection(m)
		if path == "" {
			return fmt.Errorf("%s: %s %s is not a kind testenv installs", m.source, m.meta.APIVersion, m.meta.Kind)
		}
		if _, err := c.Raw(ctx, http.MethodPost, path, nil, m.json); err != nil {
			return fmt.Errorf("%s: %w", m.source, err)
		}
	}
	return nil
}

// waitEstablished waits until each CRD is Established and discovery lists its resource in
// every served version (what controller-runtime's REST mapper reads), at most until ctx ends.
func waitEstablished(ctx context.Context, c *client.Client, crds []manifest) error {
	for _, m := range crds {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := json.Unmarshal(m.json, &crd); err != nil {
			return fmt.Errorf("%s: %w", m.source, err)
		}
		if err := poll(ctx, func() (bool, error) { return established(ctx, c, crd.Name) }); err != nil {
			return fmt.Errorf("%s: CustomResourceDefinition %s not established: %w", m.source, crd.Name, err)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := crd.Spec.Group + "/" + v.Name
			if err := poll(ctx, func() (bool, error) { return discovered(ctx, c, gv, crd.Spec.Names.Plural) }); err != nil {
				return fmt.Errorf("%s: %s %s not in discovery: %w", m.source, gv, crd.Spec.Names.Plural, err)
			}
		}
	}
	return nil
}

// established reports whether the CRD name is Established; a CRD whose names were not
// accepted never will be, and is an error with the server's reason.
func established(ctx context.Context, c *client.Client, name string) (bool, error) {
	data, err := c.Raw(ctx, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, nil)
	if err != nil {
		return false, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(data, &crd); err != nil {
		return false, err
	}
	for _, cond := range crd.Status.Conditions {
		switch {
		case cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue:
			return true, nil
		case cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse:
			return false, fmt.Errorf("names not accepted: %s", cond.Message)
		}
	}
	return false, nil
}

// discovered reports whether discovery of groupVersion lists resource.
func discovered(ctx context.Context, c *client.Client, groupVersion, resource string) (bool, error) {
	data, err := c.Raw(ctx, http.MethodGet, "/apis/"+groupVersion, nil, nil)
	if client.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(data, &list); err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }), nil
}

// poll calls cond until it holds or fails, or ctx ends; the first retries come quickly, as a
// CRD is usually established within milliseconds.
func poll(ctx context.Context, cond func() (bool, error)) error {
	wait := 500 * time.Microsecond
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}
