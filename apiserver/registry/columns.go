package registry

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Age renders a creation time the way kubectl's AGE column does ("5m", "3d4h", "<unknown>").
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// Column is a shorthand for a table column definition; priority 1 shows only with -o wide.
func Column(name, typ string, priority int32, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Priority: priority, Description: description}
}

// AgeColumn is the AGE column most resources show.
var AgeColumn = Column("Age", "string", 0, "Time since the object was created.")
