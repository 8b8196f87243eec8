package registry

import "github.com/kplane/kplane/scheme"

// Scheme and Codecs are the shared API scheme; the registry serves its types.
var (
	Scheme = scheme.Scheme
	Codecs = scheme.Codecs
)
