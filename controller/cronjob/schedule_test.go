package cronjob

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// at parses a wall-clock time "2006-01-02 15:04[:05]" in loc; in a repeated hour (DST ending)
// the suffix " EST"-style zone abbreviation picks which one.
func at(t *testing.T, loc *time.Location, s string) time.Time {
	t.Helper()
	layout := "2006-01-02 15:04"
	if strings.Count(s, ":") == 2 {
		layout += ":05"
	}
	if strings.HasSuffix(s, "T") { // "... EST" / "... EDT"
		layout += " MST"
	}
	v, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMostRecent(t *testing.T) {
	utc := time.UTC
	ny := zone(t, "America/New_York")
	tokyo := zone(t, "Asia/Tokyo")
	for _, tc := range []struct {
		name     string
		schedule string
		zone     *time.Location
		from     string // in zone
		now      string
		want     string // in zone; "" for none
		missed   missed
		err      bool
	}{
		{"every 5 minutes, before the first", "*/5 * * * *", utc, "2025-06-01 10:00", "2025-06-01 10:04:59", "", noneMissed, false},
		{"every 5 minutes, at the first", "*/5 * * * *", utc, "2025-06-01 10:00", "2025-06-01 10:05", "2025-06-01 10:05", noneMissed, false},
		{"every 5 minutes, after two", "*/5 * * * *", utc, "2025-06-01 10:00", "2025-06-01 10:12", "2025-06-01 10:10", fewMissed, false},
		{"every 5 minutes, from an odd time", "*/5 * * * *", utc, "2025-06-01 10:02:30", "2025-06-01 10:07", "2025-06-01 10:05", noneMissed, false},
		{"every 5 minutes, 101 missed", "*/5 * * * *", utc, "2025-06-01 10:00", "2025-06-01 18:25", "2025-06-01 18:25", manyMissed, false},
		{"every 5 minutes, 100 missed", "*/5 * * * *", utc, "2025-06-01 10:00", "2025-06-01 18:24", "2025-06-01 18:20", fewMissed, false},
		{"every minute", "* * * * *", utc, "2025-06-01 10:00:30", "2025-06-01 10:01:01", "2025-06-01 10:01", noneMissed, false},
		{"@hourly", "@hourly", utc, "2025-06-01 10:30", "2025-06-01 13:15", "2025-06-01 13:00", fewMissed, false},
		{"@daily", "@daily", utc, "2025-06-01 00:00", "2025-06-03 05:00", "2025-06-03 00:00", fewMissed, false},
		{"@daily, not yet", "@daily", utc, "2025-06-01 00:00", "2025-06-01 23:59", "", noneMissed, false},
		{"years missed", "@hourly", utc, "2020-01-01 00:00", "2025-06-01 13:15", "2025-06-01 13:00", manyMissed, false},
		// Gaps of 4, 4 and 16 hours: the estimate from the first gap overshoots the last
		// time; it is still found.
		{"uneven gaps", "30 6-16/4 * * 1-5", utc, "2025-03-03 06:00", "2025-03-03 20:00", "2025-03-03 14:30", fewMissed, false},
		{"uneven gaps over a weekend", "30 6-16/4 * * 1-5", utc, "2025-03-07 06:00", "2025-03-09 20:00", "2025-03-07 14:30", fewMissed, false},
		{"in the schedule's zone", "0 9 * * *", tokyo, "2025-01-01 08:00", "2025-01-01 10:00", "2025-01-01 09:00", noneMissed, false},
		// 02:30 does not exist on the day clocks spring forward: that day has no time.
		{"spring forward skips the day", "30 2 * * *", ny, "2025-03-08 02:30", "2025-03-09 12:00", "", noneMissed, false},
		{"spring forward, the day after", "30 2 * * *", ny, "2025-03-08 02:30", "2025-03-10 03:00", "2025-03-10 02:30", noneMissed, false},
		{"hourly across spring forward", "@hourly", ny, "2025-03-09 00:30", "2025-03-09 03:10", "2025-03-09 03:00", fewMissed, false},
		// 01:00-02:00 happens twice when clocks fall back: hourly runs at both 01:00s.
		{"hourly at fall back's second 1am", "@hourly", ny, "2025-11-02 00:30 EDT", "2025-11-02 01:10 EST", "2025-11-02 01:00 EST", fewMissed, false},
		{"hourly at fall back's first 1am", "@hourly", ny, "2025-11-02 00:30 EDT", "2025-11-02 01:10 EDT", "2025-11-02 01:00 EDT", noneMissed, false},
		{"daily at 01:30 on fall back", "30 1 * * *", ny, "2025-11-01 01:30", "2025-11-02 01:40 EDT", "2025-11-02 01:30 EDT", noneMissed, false},
		{"February 31st never comes", "59 23 31 2 *", utc, "2025-01-01 00:00", "2025-06-01 00:00", "", noneMissed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSchedule(tc.schedule, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			got, kind, err := mostRecent(s, at(t, tc.zone, tc.from), at(t, tc.zone, tc.now))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error: %v", err, tc.err)
			}
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("most recent %s, want none", got.In(tc.zone))
			case tc.want != "" && (got == nil || !got.Equal(at(t, tc.zone, tc.want))):
				t.Errorf("most recent %v, want %s", got, tc.want)
			}
			if kind != tc.missed {
				t.Errorf("missed %v, want %v", kind, tc.missed)
			}
		})
	}
}

func TestNext(t *testing.T) {
	utc := time.UTC
	ny := zone(t, "America/New_York")
	for _, tc := range []struct {
		name     string
		schedule string
		zone     *time.Location
		from     string
		want     string
	}{
		{"every 5 minutes", "*/5 * * * *", utc, "2025-06-01 10:05", "2025-06-01 10:10"},
		{"@hourly", "@hourly", utc, "2025-06-01 10:05", "2025-06-01 11:00"},
		{"@daily", "@daily", utc, "2025-06-01 10:05", "2025-06-02 00:00"},
		{"@weekly (Sunday)", "@weekly", utc, "2025-06-04 10:05", "2025-06-08 00:00"},
		{"@monthly", "@monthly", utc, "2025-06-04 10:05", "2025-07-01 00:00"},
		{"spring forward skips 02:30", "30 2 * * *", ny, "2025-03-08 02:30", "2025-03-10 02:30"},
		{"fall back repeats 01:30", "30 1 * * *", ny, "2025-11-02 01:30 EDT", "2025-11-02 01:30 EST"},
		{"hourly across fall back", "@hourly", ny, "2025-11-02 01:00 EDT", "2025-11-02 01:00 EST"},
		{"hourly across spring forward", "@hourly", ny, "2025-03-09 01:00", "2025-03-09 03:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSchedule(tc.schedule, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := s.Next(at(t, tc.zone, tc.from)), at(t, tc.zone, tc.want); !got.Equal(want) {
				t.Errorf("next %s, want %s", got.In(tc.zone), want)
			}
		})
	}
}

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		ok       bool
	}{
		{"* * * * *", true}, {"*/5 * * * *", true}, {"@hourly", true}, {"@every 90s", true},
		{"TZ=Asia/Tokyo 0 9 * * *", true},
		{"", false}, {"not a schedule", false}, {"* * * *", false}, {"61 * * * *", false},
		{"@fortnightly", false}, {"TZ=Nowhere/Else * * * * *", false},
	} {
		_, err := parseSchedule(tc.schedule, time.UTC)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err = %v, want ok: %v", tc.schedule, err, tc.ok)
		}
	}
	// A zone in the schedule wins over the one given.
	s, err := parseSchedule("TZ=Asia/Tokyo 0 9 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("next %s, want 09:00 in Tokyo", got)
	}
	// Without a zone of its own, a schedule runs in the zone given, whatever the zone of the
	// time it is handed.
	s, err = parseSchedule("0 9 * * *", zone(t, "Asia/Tokyo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []time.Time{
		time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(2024, 12, 31, 18, 0, 0, 0, zone(t, "America/New_York")),
	} {
		if got := s.Next(from); !got.Equal(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("next after %s: %s, want 09:00 in Tokyo", from, got)
		}
	}
}

func TestRequeueAfter(t *testing.T) {
	utc := time.UTC
	ny := zone(t, "America/New_York")
	for _, tc := range []struct {
		name       string
		schedule   string
		zone       *time.Location
		created    string
		last       string // last schedule time, "" for none
		now        string
		want       time.Duration
		negativeOK bool
	}{
		{"never run", "*/5 * * * *", utc, "2025-06-01 10:02", "", "2025-06-01 10:03", 2*time.Minute + requeueDelta, false},
		{"just run", "*/5 * * * *", utc, "2025-06-01 09:00", "2025-06-01 10:05", "2025-06-01 10:07", 3*time.Minute + requeueDelta, false},
		{"missed some", "*/5 * * * *", utc, "2025-06-01 09:00", "2025-06-01 10:00", "2025-06-01 10:12", 3*time.Minute + requeueDelta, false},
		{"every minute", "* * * * *", utc, "2025-06-01 09:00", "2025-06-01 10:00", "2025-06-01 10:00:01", time.Minute - time.Second + requeueDelta, false},
		{"@hourly", "@hourly", utc, "2025-06-01 09:00", "2025-06-01 10:00", "2025-06-01 10:59:59", time.Second + requeueDelta, false},
		{"@daily over spring forward", "30 2 * * *", ny, "2025-03-01 00:00", "2025-03-08 02:30", "2025-03-09 01:00", 24*time.Hour + 30*time.Minute + requeueDelta, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSchedule(tc.schedule, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(at(t, tc.zone, tc.created))}}
			if tc.last != "" {
				cj.Status.LastScheduleTime = &metav1.Time{Time: at(t, tc.zone, tc.last)}
			}
			if got := requeueAfter(s, cj, at(t, tc.zone, tc.now)); got != tc.want {
				t.Errorf("requeue after %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEarliest(t *testing.T) {
	created := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	last := created.Add(30 * time.Minute)
	for _, tc := range []struct {
		name     string
		last     *time.Time
		deadline *int64
		with     bool
		want     time.Time
	}{
		{"creation", nil, nil, true, created},
		{"last schedule", &last, nil, true, last},
		{"deadline later than last", &last, new(int64(60)), true, now.Add(-time.Minute)},
		{"deadline earlier than last", &last, new(int64(3600 * 2)), true, last},
		{"deadline not asked for", &last, new(int64(60)), false, last},
	} {
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		cj.Spec.StartingDeadlineSeconds = tc.deadline
		if tc.last != nil {
			cj.Status.LastScheduleTime = &metav1.Time{Time: *tc.last}
		}
		if got := earliest(cj, now, tc.with); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// cronJob is a CronJob created at created, as validation and defaults leave it.
func cronJob(schedule string, created time.Time) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "cj", Namespace: "ns", UID: "cj-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec: batchv1.CronJobSpec{
			Schedule:                   schedule,
			ConcurrencyPolicy:          batchv1.AllowConcurrent,
			Suspend:                    new(false),
			SuccessfulJobsHistoryLimit: new(int32(3)),
			FailedJobsHistoryLimit:     new(int32(1)),
		},
	}
}

func TestDecide(t *testing.T) {
	created := time.Date(2025, 6, 1, 10, 0, 30, 0, time.UTC)
	slot := time.Date(2025, 6, 1, 10, 1, 0, 0, time.UTC) // the first minute after creation
	now := slot.Add(5 * time.Second)
	wait := time.Minute - 5*time.Second + requeueDelta
	active := func(cj *batchv1.CronJob) {
		cj.Status.Active = []corev1.ObjectReference{{Kind: "Job", Namespace: "ns", Name: "cj-earlier", UID: "earlier"}}
	}
	for _, tc := range []struct {
		name    string
		change  func(*batchv1.CronJob)
		now     time.Time
		start   bool
		replace bool
		requeue bool
		reasons []string
	}{
		{"due", nil, now, true, false, true, nil},
		{"not yet due", nil, slot.Add(-time.Second), false, false, true, nil},
		{"suspended", func(cj *batchv1.CronJob) { cj.Spec.Suspend = new(true) }, now, false, false, false, nil},
		{"being deleted", func(cj *batchv1.CronJob) { cj.DeletionTimestamp = &metav1.Time{Time: now} }, now, false, false, false, nil},
		{"unparseable schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "every minute please" }, now, false, false, false, []string{"UnparseableSchedule"}},
		{"schedule never fires", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "59 23 31 2 *" }, now, false, false, false, []string{"InvalidSchedule"}},
		{"unknown zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Mars/Olympus_Mons") }, now, false, false, false, []string{"UnknownTimeZone"}},
		{"unknown zone while suspended", func(cj *batchv1.CronJob) {
			cj.Spec.TimeZone, cj.Spec.Suspend = new("Mars/Olympus_Mons"), new(true)
		}, now, false, false, false, []string{"UnknownTimeZone"}},
		{"TZ in the schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "TZ=UTC * * * * *" }, now, true, false, true, []string{"UnsupportedSchedule"}},
		{"within the starting deadline", func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = new(int64(10)) }, now, true, false, true, nil},
		{"past the starting deadline", func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = new(int64(3)) }, now, false, false, true, []string{"MissSchedule"}},
		{"past the deadline, started already", func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds = new(int64(3))
			cj.Status.LastScheduleTime = &metav1.Time{Time: slot}
		}, now, false, false, true, nil},
		{"already started (status)", func(cj *batchv1.CronJob) { cj.Status.LastScheduleTime = &metav1.Time{Time: slot} }, now, false, false, true, nil},
		{"already started (active list)", func(cj *batchv1.CronJob) {
			cj.Status.Active = []corev1.ObjectReference{{Namespace: "ns", Name: jobName(cj, slot)}}
		}, now, false, false, true, nil},
		{"allow while active", active, now, true, false, true, nil},
		{"forbid while active", func(cj *batchv1.CronJob) { active(cj); cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent }, now, false, false, true, []string{"JobAlreadyActive"}},
		{"forbid, none active", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent }, now, true, false, true, nil},
		{"replace while active", func(cj *batchv1.CronJob) { active(cj); cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent }, now, true, true, true, nil},
		{"replace, none active", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent }, now, true, false, true, nil},
		{"too many missed", func(cj *batchv1.CronJob) { cj.CreationTimestamp = metav1.NewTime(created.Add(-24 * time.Hour)) }, now, true, false, true, []string{"TooManyMissedTimes"}},
		{"too many missed, bounded by the deadline", func(cj *batchv1.CronJob) {
			cj.CreationTimestamp = metav1.NewTime(created.Add(-24 * time.Hour))
			cj.Spec.StartingDeadlineSeconds = new(int64(300))
		}, now, true, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := cronJob("* * * * *", created)
			if tc.change != nil {
				tc.change(cj)
			}
			p := decide(cj, tc.now, time.UTC)
			if got := p.start != nil; got != tc.start {
				t.Errorf("start %v, want %v", p.start, tc.start)
			} else if got && !p.start.Equal(slot) {
				t.Errorf("start %s, want %s", p.start, slot)
			}
			if p.replace != tc.replace {
				t.Errorf("replace %v, want %v", p.replace, tc.replace)
			}
			if got := p.requeue != nil; got != tc.requeue {
				t.Errorf("requeue %v, want one: %v", p.requeue, tc.requeue)
			} else if got && tc.now.Equal(now) && *p.requeue != wait {
				t.Errorf("requeue after %v, want %v", *p.requeue, wait)
			}
			var reasons []string
			for _, e := range p.events {
				reasons = append(reasons, e.reason)
				if want := corev1.EventTypeWarning; e.reason == "JobAlreadyActive" {
					want = corev1.EventTypeNormal
					if e.typ != want {
						t.Errorf("%s is a %s event, want %s", e.reason, e.typ, want)
					}
				} else if e.typ != want {
					t.Errorf("%s is a %s event, want %s", e.reason, e.typ, want)
				}
			}
			if !slices.Equal(reasons, tc.reasons) {
				t.Errorf("events %v, want %v", p.events, tc.reasons)
			}
		})
	}
}

// TestUnparseableStoredSchedule: a schedule validation would refuse, found stored anyway
// (written before validation, or by another server), gives the UnparseableSchedule warning,
// no Job and no requeue: only a change of the CronJob can mend it.
func TestUnparseableStoredSchedule(t *testing.T) {
	created := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	for _, schedule := range []string{"", "* * *", "61 * * * *", "@sometimes", "TZ=Bad/Zone * * * * *"} {
		cj := cronJob(schedule, created)
		p := decide(cj, created.Add(time.Hour), time.UTC)
		if p.start != nil || p.requeue != nil {
			t.Errorf("%q: start %v, requeue %v, want neither", schedule, p.start, p.requeue)
		}
		last := p.events[len(p.events)-1]
		if last.reason != "UnparseableSchedule" || last.typ != corev1.EventTypeWarning || !strings.Contains(last.message, "unparseable schedule: ") {
			t.Errorf("%q: events %v, want an UnparseableSchedule warning", schedule, p.events)
		}
	}
}

func TestJobFor(t *testing.T) {
	tokyo := zone(t, "Asia/Tokyo")
	cj := cronJob("0 9 * * *", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	cj.Spec.JobTemplate.Labels = map[string]string{"app": "report"}
	cj.Spec.JobTemplate.Annotations = map[string]string{"note": "daily"}
	cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	scheduled := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC) // 09:00 in Tokyo
	for _, tc := range []struct {
		stamp *time.Location
		want  string
	}{{tokyo, "2025-01-02T09:00:00+09:00"}, {time.UTC, "2025-01-02T00:00:00Z"}, {nil, "2025-01-02T00:00:00Z"}} {
		j := jobFor(cj, scheduled, tc.stamp)
		if got := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; got != tc.want {
			t.Errorf("scheduled timestamp %q, want %q", got, tc.want)
		}
	}
	j := jobFor(cj, scheduled, tokyo)
	if want := "cj-28929600"; j.Name != want || j.Namespace != "ns" {
		t.Errorf("job %s/%s, want ns/%s", j.Namespace, j.Name, want)
	}
	if j.Labels["app"] != "report" || j.Annotations["note"] != "daily" || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("template not copied: %+v", j)
	}
	ref := metav1.GetControllerOf(j)
	if ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" || ref.APIVersion != "batch/v1" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller reference %+v", ref)
	}
	// The Job's maps are its own: changing them leaves the CronJob's template alone.
	j.Labels["app"] = "changed"
	j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	if cj.Spec.JobTemplate.Labels["app"] != "report" || cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Error("the Job shares the CronJob's template")
	}
}

func TestBeyondLimit(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	job := func(name string, start *time.Time) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if start != nil {
			j.Status.StartTime = &metav1.Time{Time: *start}
		}
		return j
	}
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	jobs := []*batchv1.Job{job("never-started", nil), job("c", &t2), job("b", &t1), job("a", &t1), job("oldest", &t0)}
	names := func(js []*batchv1.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.Name)
		}
		return out
	}
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{5, nil}, {9, nil}, {3, []string{"oldest", "a"}}, {1, []string{"oldest", "a", "b", "c"}},
		{0, []string{"oldest", "a", "b", "c", "never-started"}},
	} {
		if got := names(beyondLimit(jobs, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("limit %d: %v, want %v", tc.limit, got, tc.want)
		}
	}
	if jobs[0].Name != "never-started" {
		t.Error("beyondLimit reordered its argument")
	}
}
