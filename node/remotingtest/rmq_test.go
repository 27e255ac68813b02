//go:build rocketmq && !race

package remotingtest

import (
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/admin"
)

// A consumer group of 255 characters (RocketMQ's limit) has a retry topic
// of 262: registered by its broker, rocketmq-client-go finds its queues, as
// a push consumer of the group looks the topic up.
func TestRmqLongGroupRetryTopic(t *testing.T) {
	w := newWorld(t)
	stub := startStubBroker(t)
	retry := "%RETRY%" + strings.Repeat("g", 255)
	w.register("broker-a", stub.addr, "TopicTest", retry)

	adm, err := admin.NewAdmin(admin.WithResolver(w.resolver()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	mqs, err := adm.FetchPublishMessageQueues(ctxFor(t), retry)
	if err != nil || len(mqs) != 4 || mqs[0].Topic != retry {
		t.Fatalf("queues of the retry topic: %v %v", mqs, err)
	}
}
