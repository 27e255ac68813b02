package remoting

// Request codes a NameServer handles (RocketMQ RequestCode.java).
const (
	PutKVConfig                  int16 = 100
	GetKVConfig                  int16 = 101
	DeleteKVConfig               int16 = 102
	RegisterBroker               int16 = 103
	UnregisterBroker             int16 = 104
	GetRouteInfoByTopic          int16 = 105
	GetBrokerClusterInfo         int16 = 106
	WipeWritePermOfBroker        int16 = 205
	GetAllTopicListFromNameSrv   int16 = 206
	DeleteTopicInNameSrv         int16 = 216
	RegisterTopicInNameSrv       int16 = 217
	GetKVListByNamespace         int16 = 219
	GetTopicsByCluster           int16 = 224
	GetSystemTopicListFromNS     int16 = 304
	GetUnitTopicList             int16 = 311
	GetHasUnitSubTopicList       int16 = 312
	GetHasUnitSubUnunitTopicList int16 = 313
	UpdateNameSrvConfig          int16 = 318
	GetNameSrvConfig             int16 = 319
	QueryDataVersion             int16 = 322
	AddWritePermOfBroker         int16 = 327
	GetBrokerMemberGroup         int16 = 901
	BrokerHeartbeat              int16 = 904
)

// Response codes (RocketMQ ResponseCode.java and RemotingSysResponseCode.java).
const (
	Success                 int16 = 0
	SystemError             int16 = 1
	SystemBusy              int16 = 2
	RequestCodeNotSupported int16 = 3
	NoPermission            int16 = 16
	TopicNotExist           int16 = 17
	QueryNotFound           int16 = 22
	GoAway                  int16 = 1500
)

// Flag bits of a command.
const (
	FlagResponse int32 = 1 // RPC_TYPE: the command is a response
	FlagOneway   int32 = 2 // RPC_ONEWAY: no response is ever written
)

// Serialize types: the high byte of a frame's second int.
const (
	SerializeJSON     byte = 0
	SerializeRocketMQ byte = 1
)

// Versions (MQVersion.Version ordinals) that change what a NameServer writes.
const (
	// V4_5_2 is what rocketmq-client-go sends (its _Version constant).
	V4_5_2 int16 = 317
	// V4_9_4 is the first version that gets route bodies in standard JSON.
	V4_9_4 int16 = 401
	// V5_0_0 is the first 5.x version.
	V5_0_0 int16 = 413
	// V5_3_3 is the version a 5.3.3 NameServer stamps on its responses.
	V5_3_3 int16 = 479
)

// Language names and their numbers in the ROCKETMQ binary header
// (LanguageCode.java).
var languages = []string{
	"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
	"HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
}

// languageOther is OTHER's number, used for names the table lacks.
const languageOther = 7

func languageCode(name string) byte {
	for i, n := range languages {
		if n == name {
			return byte(i)
		}
	}
	return languageOther
}

func languageName(code byte) string {
	if int(code) < len(languages) {
		return languages[code]
	}
	return languages[languageOther]
}

// Permission bits of a queue (PermName.java).
const (
	PermPriority int32 = 8
	PermRead     int32 = 4
	PermWrite    int32 = 2
	PermInherit  int32 = 1
)

// Topic system flag bits (TopicSysFlag.java).
const (
	TopicSysFlagUnit    int32 = 1
	TopicSysFlagUnitSub int32 = 2
)

// MasterID is a group master's broker id (MixAll.MASTER_ID).
const MasterID int64 = 0

// DefaultMaxFrame is RocketMQ's frame cap (com.rocketmq.remoting.frameMaxLength):
// a frame, its 4 length bytes included, may not be larger.
const DefaultMaxFrame = 16 << 20
