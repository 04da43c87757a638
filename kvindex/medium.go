package kvindex

// Medium is the cache tier a block is held in (vllm-kv-events.md §3.4).
type Medium uint8

const (
	// GPU is the device cache: medium nil, "GPU" or "DEVICE".
	GPU Medium = iota
	// CPU is host memory: the OffloadingConnector, LMCache and Dynamo's CPU tiers.
	CPU
	// Disk is every slower tier: local storage, object stores, remote and shared caches.
	Disk
)

// NumMedia is the number of Medium values.
const NumMedia = 3

// String returns the medium's metric label: "gpu", "cpu" or "disk".
func (m Medium) String() string {
	switch m {
	case GPU:
		return "gpu"
	case CPU:
		return "cpu"
	case Disk:
		return "disk"
	}
	return "unknown"
}

// mediumNames lists every accepted wire spelling in upper case with its tier.
var mediumNames = [...]struct {
	name string
	m    Medium
}{
	{"GPU", GPU}, {"DEVICE", GPU},
	{"CPU", CPU}, {"CPU_PINNED", CPU}, {"CPU_TIER1", CPU}, {"CPU_TIER2", CPU},
	{"STORAGE", Disk}, {"FS", Disk}, {"OBJ", Disk}, {"DISK", Disk}, {"NVME", Disk},
	{"EXTERNAL", Disk}, {"NETWORK", Disk}, {"REMOTE", Disk}, {"SHARED", Disk},
}

// ParseMedium maps a wire `medium` value to its tier, case-insensitively: nil or empty (producers
// before the field existed) and "GPU"/"DEVICE" are GPU; "CPU", "CPU_PINNED", "CPU_TIER1",
// "CPU_TIER2" are CPU; "STORAGE", "FS", "OBJ", "DISK", "NVME", "EXTERNAL", "NETWORK", "REMOTE",
// "SHARED" are Disk. Anything else returns (0, false). It does not allocate.
func ParseMedium(b []byte) (Medium, bool) {
	if len(b) == 0 {
		return GPU, true
	}
	for _, e := range mediumNames {
		if equalFoldASCII(b, e.name) {
			return e.m, true
		}
	}
	return 0, false
}

// equalFoldASCII reports whether b equals the upper-case ASCII string upper, ignoring ASCII case.
func equalFoldASCII(b []byte, upper string) bool {
	if len(b) != len(upper) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}
