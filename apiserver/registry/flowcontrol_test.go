package registry

import (
	"slices"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newFlowSchema(change func(*flowcontrolv1.FlowSchema)) *flowcontrolv1.FlowSchema {
	fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "batch"},
		Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
			Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
				ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: "*", Namespace: "batch"}}},
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}}},
		}},
	}}
	if change != nil {
		change(fs)
	}
	return fs
}

func newPriorityLevel(change func(*flowcontrolv1.PriorityLevelConfiguration)) *flowcontrolv1.PriorityLevelConfiguration {
	pl := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
		Type: flowcontrolv1.PriorityLevelEnablementLimited,
		Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: flowcontrolv1.LimitResponse{
			Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}}},
	}}
	if change != nil {
		change(pl)
	}
	return pl
}

// TestFlowControlDefaults: precedence 1000; 30 shares, nothing lent, 64 queues, hands of 8,
// 50 waiting per queue.
func TestFlowControlDefaults(t *testing.T) {
	fs := newFlowSchema(nil)
	flowSchemas.PrepareCreate(fs)
	if fs.Spec.MatchingPrecedence != 1000 {
		t.Errorf("matchingPrecedence %d", fs.Spec.MatchingPrecedence)
	}
	pl := newPriorityLevel(nil)
	priorityLevelConfigurations.PrepareCreate(pl)
	l := pl.Spec.Limited
	if *l.NominalConcurrencyShares != 30 || *l.LendablePercent != 0 || *l.LimitResponse.Queuing != (flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 8, QueueLengthLimit: 50}) {
		t.Errorf("limited %+v, queuing %+v", l, l.LimitResponse.Queuing)
	}
	want := []any{"batch", "Limited", int64(30), int64(64), int64(8), int64(50), "<unknown>"}
	if got := priorityLevelConfigurations.TableRow(pl); !slices.Equal(got, want) {
		t.Errorf("row %q, want %q", got, want)
	}
	if got, want := flowSchemas.TableRow(fs), []any{"batch", "batch", int64(1000), "<none>", "<unknown>", "?"}; !slices.Equal(got, want) {
		t.Errorf("row %q, want %q", got, want)
	}
}

func TestValidateFlowControl(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  Object
		def  Strategy
		want []string
	}{
		{"flow schema", newFlowSchema(nil), flowSchemas, nil},
		{"precedence 1", newFlowSchema(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 1 }),
			flowSchemas, []string{"FieldValueInvalid spec.matchingPrecedence"}},
		{"precedence too high", newFlowSchema(func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 10001 }),
			flowSchemas, []string{"FieldValueInvalid spec.matchingPrecedence"}},
		{"rules", newFlowSchema(func(fs *flowcontrolv1.FlowSchema) {
			fs.Spec.PriorityLevelConfiguration.Name = ""
			fs.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: "ByMood"}
			fs.Spec.Rules = []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, Group: &flowcontrolv1.GroupSubject{Name: "g"}}, {Kind: "Robot"}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"fly"}, APIGroups: []string{"*", "apps"},
					Namespaces: []string{"Bad_NS"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*", "get"}, NonResourceURLs: []string{"healthz", "/a/*/b"}}},
			}}
		}), flowSchemas, []string{
			"FieldValueForbidden spec.rules[0].subjects[0].group",
			"FieldValueInvalid spec.rules[0].nonResourceRules[0].nonResourceURLs[0]",
			"FieldValueInvalid spec.rules[0].nonResourceRules[0].nonResourceURLs[1]",
			"FieldValueInvalid spec.rules[0].nonResourceRules[0].verbs",
			"FieldValueInvalid spec.rules[0].resourceRules[0].apiGroups",
			"FieldValueInvalid spec.rules[0].resourceRules[0].namespaces[0]",
			"FieldValueNotSupported spec.distinguisherMethod.type",
			"FieldValueNotSupported spec.rules[0].resourceRules[0].verbs",
			"FieldValueNotSupported spec.rules[0].subjects[1].kind",
			"FieldValueRequired spec.priorityLevelConfiguration.name",
			"FieldValueRequired spec.rules[0].resourceRules[0].resources",
			"FieldValueRequired spec.rules[0].subjects[0].user",
		}},
		{"mandatory flow schema changed", func() Object {
			fs := MandatoryFlowSchemas()[1]
			fs.Spec.MatchingPrecedence = 9999
			return fs
		}(), flowSchemas, []string{"FieldValueInvalid spec"}},
		{"mandatory flow schema", MandatoryFlowSchemas()[0], flowSchemas, nil},
		{"priority level", newPriorityLevel(nil), priorityLevelConfigurations, nil},
		{"queuing", newPriorityLevel(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LendablePercent = new(int32(101))
			pl.Spec.Limited.LimitResponse.Queuing = &flowcontrolv1.QueuingConfiguration{Queues: 4, HandSize: 8, QueueLengthLimit: -1}
		}), priorityLevelConfigurations, []string{"FieldValueInvalid spec.limited.lendablePercent",
			"FieldValueInvalid spec.limited.limitResponse.queuing.handSize", "FieldValueInvalid spec.limited.limitResponse.queuing.queueLengthLimit"}},
		{"too much entropy", newPriorityLevel(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse.Queuing = &flowcontrolv1.QueuingConfiguration{Queues: 1 << 20, HandSize: 4, QueueLengthLimit: 1}
		}), priorityLevelConfigurations, []string{"FieldValueInvalid spec.limited.limitResponse.queuing.handSize"}},
		{"reject with queuing", newPriorityLevel(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Limited.LimitResponse.Type = flowcontrolv1.LimitResponseTypeReject
		}), priorityLevelConfigurations, []string{"FieldValueForbidden spec.limited.limitResponse.queuing"}},
		{"exempt named otherwise", newPriorityLevel(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Spec.Type = flowcontrolv1.PriorityLevelEnablementExempt
		}), priorityLevelConfigurations, []string{"FieldValueForbidden spec.limited", "FieldValueInvalid spec.type"}},
		{"exempt level tuned", func() Object {
			pl := MandatoryPriorityLevels()[0]
			pl.Spec.Exempt.NominalConcurrencyShares = new(int32(10))
			return pl
		}(), priorityLevelConfigurations, nil},
		{"catch-all level changed", func() Object {
			pl := MandatoryPriorityLevels()[1]
			pl.Spec.Limited.NominalConcurrencyShares = new(int32(10))
			return pl
		}(), priorityLevelConfigurations, []string{"FieldValueInvalid spec"}},
		{"v1beta3 annotation", newPriorityLevel(func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Annotations = map[string]string{preserveZeroSharesAnnotation: ""}
		}), priorityLevelConfigurations, []string{"FieldValueForbidden metadata.annotations"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.def.PrepareCreate(tc.obj)
			if got := errs(tc.def.ValidateObject(tc.obj, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestFlowSchemaStatus: a status write keeps the spec and checks the conditions.
func TestFlowSchemaStatus(t *testing.T) {
	old := newFlowSchema(nil)
	flowSchemas.PrepareCreate(old)
	old.ResourceVersion = "1"
	fs := old.DeepCopy()
	fs.Spec.MatchingPrecedence = 5
	fs.Status.Conditions = []flowcontrolv1.FlowSchemaCondition{{Type: flowcontrolv1.FlowSchemaConditionDangling, Status: flowcontrolv1.ConditionFalse},
		{Type: flowcontrolv1.FlowSchemaConditionDangling}}
	flowSchemas.PrepareUpdate(fs, old, "status")
	if fs.Spec.MatchingPrecedence != 1000 {
		t.Errorf("status write changed the spec")
	}
	if got, want := errs(flowSchemas.ValidateObject(fs, old)), []string{"FieldValueDuplicate status.conditions[1].type"}; !slices.Equal(got, want) {
		t.Errorf("errors %q, want %q", got, want)
	}
	if got := flowSchemas.TableRow(fs)[5]; got != "False" {
		t.Errorf("MissingPL %q", got)
	}
}
