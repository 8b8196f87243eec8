package client

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	"github.com/kplane/kplane/scheme"
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
)

// protobufMagic starts every object in Kubernetes' protobuf encoding; a runtime.Unknown
// envelope (type meta, then the object's own bytes) follows it.
var protobufMagic = []byte("k8s\x00")

// message is what the generated k8s.io/api types offer for protobuf.
type message interface {
	Reset()
	Unmarshal([]byte) error
}

// envelope is the parts of a runtime.Unknown that decoding needs, pointing into the input.
type envelope struct {
	apiVersion, kind []byte
	raw              []byte
	encoded          bool // contentEncoding set: not something the fast path handles
}

var errMalformed = errors.New("malformed protobuf envelope")

// parseEnvelope reads the envelope after the magic without copying anything.
func parseEnvelope(data []byte) (envelope, error) {
	var e envelope
	err := fields(data, func(num protowire.Number, v []byte) error {
		switch num {
		case 1: // typeMeta
			return fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					e.apiVersion = v
				case 2:
					e.kind = v
				}
				return nil
			})
		case 2:
			e.raw = v
		case 3:
			e.encoded = len(v) > 0
		}
		return nil
	})
	return e, err
}

// fields calls f with each length-delimited field of a protobuf message, skipping the others.
// The fields the callers read (of Unknown, TypeMeta, WatchEvent, RawExtension, lists) are all
// length-delimited and numbered 1 to 4, so another wire type there makes the message malformed.
func fields(data []byte, f func(protowire.Number, []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return errMalformed
		}
		data = data[n:]
		if typ != protowire.BytesType {
			if num <= 4 {
				return errMalformed
			}
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return errMalformed
			}
			data = data[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return errMalformed
		}
		if err := f(num, v); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// decodeProtobuf decodes an object of into's own kind straight from the envelope's bytes (not
// from a copy of them, as runtime.Unknown would make), and the type meta is set from the
// scheme's strings rather than allocated per object, which matters for watch streams of tens of
// thousands of objects. It reports false, having changed nothing, for anything else (another kind, a
// content encoding, a type without protobuf methods), which the general decoder then handles.
//
// With a sharer, parts seen before are shared (see sharer): into must then be a new object, and
// sc is scratch space for the sharer.
func decodeProtobuf(data []byte, into runtime.Object, share *sharer, sc *scratch) (bool, error) {
	msg, ok := into.(message)
	if !ok || !bytes.HasPrefix(data, protobufMagic) {
		return false, nil
	}
	e, err := parseEnvelope(data[len(protobufMagic):])
	if err != nil || e.encoded {
		return false, nil
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(into)
	if err != nil {
		return false, nil
	}
	gvk := gvks[0]
	if string(e.kind) != gvk.Kind || !isAPIVersion(e.apiVersion, gvk.Group, gvk.Version) {
		return false, nil
	}
	if share != nil {
		err = share.unmarshal(e.raw, msg, reflect.ValueOf(into).Elem(), sc)
	} else {
		msg.Reset()
		err = msg.Unmarshal(e.raw)
	}
	if err != nil {
		return true, fmt.Errorf("client: decode %s: %w", gvk.Kind, err)
	}
	into.GetObjectKind().SetGroupVersionKind(gvk)
	return true, nil
}

// isAPIVersion reports whether apiVersion is group/version (version alone for the core group),
// without building the string.
func isAPIVersion(apiVersion []byte, group, version string) bool {
	if group == "" {
		return string(apiVersion) == version
	}
	return len(apiVersion) == len(group)+1+len(version) && string(apiVersion[:len(group)]) == group &&
		apiVersion[len(group)] == '/' && string(apiVersion[len(group)+1:]) == version
}
