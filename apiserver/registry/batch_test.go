package registry

import (
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func newJob(change func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: meta("j"), Spec: batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}}
	j.UID = types.UID("0f2c-uid")
	if change != nil {
		change(j)
	}
	return j
}

func newCronJob(schedule string, change func(*batchv1.CronJob)) *batchv1.CronJob {
	c := &batchv1.CronJob{ObjectMeta: meta("cj"), Spec: batchv1.CronJobSpec{Schedule: schedule,
		JobTemplate: batchv1.JobTemplateSpec{Spec: newJob(nil).Spec}}}
	if change != nil {
		change(c)
	}
	return c
}

// TestJobDefaults: a Job with neither completions nor parallelism runs one pod once; its
// selector is generated from its UID and its template labelled to match.
func TestJobDefaults(t *testing.T) {
	j := newJob(nil)
	jobs.PrepareCreate(j)
	s := j.Spec
	if deref(s.Completions) != 1 || deref(s.Parallelism) != 1 || deref(s.BackoffLimit) != 6 ||
		deref(s.CompletionMode) != batchv1.NonIndexedCompletion || deref(s.Suspend) || deref(s.ManualSelector) ||
		deref(s.PodReplacementPolicy) != batchv1.TerminatingOrFailed {
		t.Errorf("defaults: %+v", s)
	}
	if got := s.Selector.MatchLabels; len(got) != 1 || got[batchv1.ControllerUidLabel] != "0f2c-uid" {
		t.Errorf("selector %v", got)
	}
	want := map[string]string{"job-name": "j", "controller-uid": "0f2c-uid", batchv1.JobNameLabel: "j", batchv1.ControllerUidLabel: "0f2c-uid"}
	for k, v := range want {
		if s.Template.Labels[k] != v {
			t.Errorf("template label %s = %q, want %q", k, s.Template.Labels[k], v)
		}
	}
	if errs := jobs.ValidateObject(j, nil); len(errs) > 0 {
		t.Errorf("defaulted job invalid: %v", errs)
	}
	indexed := newJob(func(j *batchv1.Job) {
		j.Spec.Parallelism, j.Spec.CompletionMode = new(int32(3)), new(batchv1.IndexedCompletion)
		j.Spec.BackoffLimitPerIndex = new(int32(1))
		j.Spec.Completions = new(int32(5))
	})
	jobs.PrepareCreate(indexed)
	if deref(indexed.Spec.BackoffLimit) != 1<<31-1 {
		t.Errorf("backoffLimit with a per-index limit = %d, want MaxInt32", deref(indexed.Spec.BackoffLimit))
	}
}

func TestValidateBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Strategy
		obj  Object
		want []string
	}{
		{"job ok", jobs, newJob(nil), nil},
		{"negative counts", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.Completions, j.Spec.Parallelism, j.Spec.BackoffLimit = new(int32(-1)), new(int32(-2)), new(int32(-3))
			j.Spec.ActiveDeadlineSeconds = new(int64(-1))
		}), []string{"FieldValueInvalid spec.activeDeadlineSeconds", "FieldValueInvalid spec.backoffLimit",
			"FieldValueInvalid spec.completions", "FieldValueInvalid spec.parallelism"}},
		{"restartPolicy Always", jobs, newJob(func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways }),
			[]string{"FieldValueRequired spec.template.spec.restartPolicy"}},
		{"indexed without completions", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.CompletionMode, j.Spec.Parallelism = new(batchv1.IndexedCompletion), new(int32(2))
		}), []string{"FieldValueRequired spec.completions"}},
		{"unknown completion mode", jobs, newJob(func(j *batchv1.Job) { j.Spec.CompletionMode = new(batchv1.CompletionMode("Sometimes")) }),
			[]string{"FieldValueNotSupported spec.completionMode"}},
		{"indexed name too long for its hostnames", jobs, newJob(func(j *batchv1.Job) {
			j.Name = "a23456789012345678901234567890123456789012345678901234567890"
			j.Spec.CompletionMode, j.Spec.Completions = new(batchv1.IndexedCompletion), new(int32(1000))
		}), []string{"FieldValueInvalid metadata.name"}},
		{"wrong generated labels", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{batchv1.JobNameLabel: "other"}
		}), []string{"FieldValueInvalid spec.template.metadata.labels[batch.kubernetes.io/job-name]"}},
		{"manual selector not matching", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.ManualSelector = new(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}), []string{"FieldValueInvalid spec.template.metadata.labels"}},
		{"pod failure policy", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3, 0, 3}, ContainerName: new("nope")}},
				{Action: "Explode"},
			}}
		}), []string{
			"FieldValueDuplicate spec.podFailurePolicy.rules[0].onExitCodes.values[2]",
			"FieldValueInvalid spec.podFailurePolicy.rules[0].onExitCodes.containerName",
			"FieldValueInvalid spec.podFailurePolicy.rules[0].onExitCodes.values",
			"FieldValueInvalid spec.podFailurePolicy.rules[0].onExitCodes.values[1]",
			"FieldValueInvalid spec.podFailurePolicy.rules[1]",
			"FieldValueNotSupported spec.podFailurePolicy.rules[1].action",
		}},
		{"success policy", jobs, newJob(func(j *batchv1.Job) {
			j.Spec.CompletionMode, j.Spec.Completions = new(batchv1.IndexedCompletion), new(int32(5))
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
				{SucceededIndexes: new("0,2-3"), SucceededCount: new(int32(4))},
				{SucceededIndexes: new("3,1")},
				{SucceededIndexes: new("7")},
			}}
		}), []string{"FieldValueInvalid spec.successPolicy.rules[0].succeededCount",
			"FieldValueInvalid spec.successPolicy.rules[1].succeededIndexes",
			"FieldValueInvalid spec.successPolicy.rules[2].succeededIndexes"}},
		{"cronjob ok", cronJobs, newCronJob("*/5 * * * *", nil), nil},
		{"cronjob macro", cronJobs, newCronJob("@hourly", nil), nil},
		{"bad schedule", cronJobs, newCronJob("every minute", nil), []string{"FieldValueInvalid spec.schedule"}},
		{"TZ in schedule", cronJobs, newCronJob("TZ=UTC 0 * * * *", nil), []string{"FieldValueInvalid spec.schedule"}},
		{"unknown time zone", cronJobs, newCronJob("0 * * * *", func(c *batchv1.CronJob) { c.Spec.TimeZone = new("Mars/Olympus") }),
			[]string{"FieldValueInvalid spec.timeZone"}},
		{"Local time zone", cronJobs, newCronJob("0 * * * *", func(c *batchv1.CronJob) { c.Spec.TimeZone = new("Local") }),
			[]string{"FieldValueInvalid spec.timeZone"}},
		{"time zone ok", cronJobs, newCronJob("0 9 * * 1-5", func(c *batchv1.CronJob) { c.Spec.TimeZone = new("Europe/Berlin") }), nil},
		{"cronjob policy and limits", cronJobs, newCronJob("0 * * * *", func(c *batchv1.CronJob) {
			c.Spec.ConcurrencyPolicy = "Sometimes"
			c.Spec.SuccessfulJobsHistoryLimit, c.Spec.StartingDeadlineSeconds = new(int32(-1)), new(int64(-1))
		}), []string{"FieldValueInvalid spec.startingDeadlineSeconds", "FieldValueInvalid spec.successfulJobsHistoryLimit",
			"FieldValueNotSupported spec.concurrencyPolicy"}},
		{"cronjob template selector", cronJobs, newCronJob("0 * * * *", func(c *batchv1.CronJob) {
			c.Spec.JobTemplate.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}), []string{"FieldValueInvalid spec.jobTemplate.spec.selector"}},
		{"cronjob name too long", cronJobs, newCronJob("0 * * * *", func(c *batchv1.CronJob) {
			c.Name = "a2345678901234567890123456789012345678901234567890123"
		}), []string{"FieldValueInvalid metadata.name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.PrepareCreate(tc.obj)
			if got := errs(tc.s.ValidateObject(tc.obj, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateBatchUpdate(t *testing.T) {
	suspended := func(j *batchv1.Job) { j.Spec.Suspend = new(true) }
	indexed := func(j *batchv1.Job) {
		j.Spec.CompletionMode, j.Spec.Completions, j.Spec.Parallelism = new(batchv1.IndexedCompletion), new(int32(3)), new(int32(3))
	}
	checkUpdates(t, []updateCase{
		{"parallelism", jobs, newJob(nil), func(o Object) { o.(*batchv1.Job).Spec.Parallelism = new(int32(4)) }, nil},
		{"completions", jobs, newJob(nil), func(o Object) { o.(*batchv1.Job).Spec.Completions = new(int32(4)) },
			[]string{"FieldValueInvalid spec.completions"}},
		{"indexed completions with parallelism", jobs, newJob(indexed), func(o Object) {
			o.(*batchv1.Job).Spec.Completions, o.(*batchv1.Job).Spec.Parallelism = new(int32(5)), new(int32(5))
		}, nil},
		{"indexed completions alone", jobs, newJob(indexed), func(o Object) { o.(*batchv1.Job).Spec.Completions = new(int32(5)) },
			[]string{"FieldValueInvalid spec.completions"}},
		{"template", jobs, newJob(nil), func(o Object) { o.(*batchv1.Job).Spec.Template.Spec.Containers[0].Image = "other" },
			[]string{"FieldValueInvalid spec.template"}},
		{"node selector of a running job", jobs, newJob(nil), func(o Object) {
			o.(*batchv1.Job).Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
		}, []string{"FieldValueInvalid spec.template"}},
		{"node selector of a suspended job", jobs, newJob(suspended), func(o Object) {
			o.(*batchv1.Job).Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
		}, nil},
		{"completion mode", jobs, newJob(nil), func(o Object) {
			indexed(o.(*batchv1.Job))
		}, []string{"FieldValueInvalid spec.completionMode"}},
		{"schedule", cronJobs, newCronJob("0 * * * *", nil), func(o Object) { o.(*batchv1.CronJob).Spec.Schedule = "@daily" }, nil},
		{"bad schedule", cronJobs, newCronJob("0 * * * *", nil), func(o Object) { o.(*batchv1.CronJob).Spec.Schedule = "61 * * * *" },
			[]string{"FieldValueInvalid spec.schedule"}},
	})
}

func TestParseIndexes(t *testing.T) {
	for _, tc := range []struct {
		in    string
		total int32
		ok    bool
	}{{"", 0, true}, {"0", 1, true}, {"0,2-4,9", 5, true}, {"3,1", 0, false}, {"2-2", 0, false},
		{"10", 0, false}, {"-1", 0, false}, {"a", 0, false}, {"01", 0, false}, {"1,,2", 0, false}} {
		n, err := ParseIndexes(tc.in, 10)
		if (err == nil) != tc.ok || n != tc.total {
			t.Errorf("%q: %d, %v; want %d, ok %v", tc.in, n, err, tc.total, tc.ok)
		}
	}
}
