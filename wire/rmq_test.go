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

// TestRmqPopRetryTopicV2Names: a RocketMQ 5 broker with
// enableRetryTopicV2 names a pop consumer's retry topic
// %RETRY%<group>+<topic> (KeyBuilder.buildPopRetryTopicV2) and registers
// it; a NameServer routes it like any other. The node refused the '+':
// the topic was skipped from the registration and a route query for it
// answered "invalid topic name". '+' is a topic character after the
// retry prefix only, as the broker uses it.
func TestRmqPopRetryTopicV2Names(t *testing.T) {
	for _, tc := range []struct {
		name  string
		valid bool
	}{
		{"%RETRY%group+TopicTest", true},
		{"%RETRY%group_TopicTest", true}, // V1
		{"%RETRY%" + strings.Repeat("g", 255) + "+" + strings.Repeat("t", MaxTopicNameLen), true},
		{"Topic+Test", false},
		{"%DLQ%group+TopicTest", false},
		{"+", false},
	} {
		if got := ValidTopicName(tc.name) == nil; got != tc.valid || validTopicName(tc.name) != tc.valid {
			t.Errorf("%q: ValidTopicName %v (%v), table %v, want %v", tc.name, got, ValidTopicName(tc.name), validTopicName(tc.name), tc.valid)
		}
	}
}
