package kvzmq

import (
	"fmt"
	"strconv"
	"strings"
)

// OffsetEndpoint applies vLLM's data-parallel offset (offset_endpoint_port, vllm-kv-events.md
// §1.3) to a PUB or replay endpoint: rank 0 is unchanged; tcp adds rank to the port (the text
// after the last ':'); inproc appends "_dp<rank>"; ipc with rank > 0 is rejected.
func OffsetEndpoint(endpoint string, rank int64) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("kvzmq: offset endpoint %q: rank %d must be >= 0", endpoint, rank)
	}
	if rank == 0 {
		return endpoint, nil
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", fmt.Errorf("kvzmq: offset endpoint %q rank=%d: no scheme", endpoint, rank)
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(endpoint, ':')
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil || port <= 0 || port > 65535 {
			return "", fmt.Errorf("kvzmq: offset endpoint %q rank=%d: port %q is not in 1..65535", endpoint, rank, endpoint[i+1:])
		}
		if port+int(rank) > 65535 {
			return "", fmt.Errorf("kvzmq: offset endpoint %q rank=%d: port %d+%d exceeds 65535", endpoint, rank, port, rank)
		}
		return endpoint[:i+1] + strconv.Itoa(port+int(rank)), nil
	case "inproc":
		return endpoint + "_dp" + strconv.FormatInt(rank, 10), nil
	case "ipc":
		return "", fmt.Errorf("kvzmq: offset endpoint %q rank=%d: ipc endpoints cannot be offset for data-parallel ranks > 0", endpoint, rank)
	}
	return "", fmt.Errorf("kvzmq: offset endpoint %q rank=%d: unknown scheme %q", endpoint, rank, scheme)
}
