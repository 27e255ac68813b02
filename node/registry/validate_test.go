package registry

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestQuickValidTopic: the table check agrees with wire.ValidTopicName on
// every byte, the length limits and random names.
func TestQuickValidTopic(t *testing.T) {
	names := []string{"", "a", strings.Repeat("a", wire.MaxTopicNameLen), strings.Repeat("a", wire.MaxTopicNameLen+1),
		"TopicTest", "%RETRY%group", "a|b-c_d", "a b", "a/b", "é", "a\x00"}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}), "ok"+string([]byte{byte(c)}))
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 2000 {
		b := make([]byte, rng.IntN(140))
		for i := range b {
			const alphabet = "aZ09_-%|.: \xff"
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		if got, want := quickValidTopic(n), wire.ValidTopicName(n) == nil; got != want {
			t.Errorf("quickValidTopic(%q) = %v, ValidTopicName says %v", n, got, want)
		}
	}
}
