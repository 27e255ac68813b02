package wire

import (
	"strings"
	"testing"
)

// A consumer group's retry and dead-letter topics may be longer than an
// ordinary topic (a group has up to 255 characters); the decoders' table
// check and ValidTopicName agree on where each limit falls.
func TestRmqGroupTopicNameLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		valid bool
	}{
		{strings.Repeat("t", MaxTopicNameLen), true},
		{strings.Repeat("t", MaxTopicNameLen+1), false},
		{"%RETRY%" + strings.Repeat("g", 255), true},
		{"%DLQ%" + strings.Repeat("g", 255), true},
		{"%RETRY%" + strings.Repeat("g", MaxGroupTopicNameLen-7), true},
		{"%RETRY%" + strings.Repeat("g", MaxGroupTopicNameLen-6), false},
		{"%RETRY" + strings.Repeat("g", 200), false},
	} {
		if got := ValidTopicName(tc.name) == nil; got != tc.valid || validTopicName(tc.name) != tc.valid {
			t.Errorf("%.12s… (%d bytes): ValidTopicName %v, table %v, want %v", tc.name, len(tc.name), got, validTopicName(tc.name), tc.valid)
		}
	}
}
