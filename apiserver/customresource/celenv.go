package customresource

import "github.com/google/cel-go/cel"

// CELEnv is the base CEL environment of Kubernetes' expressions (language options and
// function libraries, no variables): CRD validation rules extend it with self and oldSelf,
// admission's match conditions and policies with object, oldObject, request and params.
func CELEnv() (*cel.Env, error) { return baseEnv() }
