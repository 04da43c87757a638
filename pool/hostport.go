package pool

import "strings"

// splitHostPort splits "host:port", "[host]:port" or "[host%zone]:port" into host and port as
// net.SplitHostPort does (the pool core does not import net): ok is false where
// net.SplitHostPort returns an error. hostport_test.go checks the two agree.
func splitHostPort(hostport string) (host, port string, ok bool) {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return "", "", false // missing port
	}
	j, k := 0, 0 // where '[' and ']' may no longer appear
	if hostport[0] == '[' {
		end := strings.IndexByte(hostport, ']')
		if end < 0 || end+1 != i {
			return "", "", false // missing ']', missing port or too many colons
		}
		host, j, k = hostport[1:end], 1, end+1
	} else {
		host = hostport[:i]
		if strings.IndexByte(host, ':') >= 0 {
			return "", "", false // too many colons
		}
	}
	if strings.IndexByte(hostport[j:], '[') >= 0 || strings.IndexByte(hostport[k:], ']') >= 0 {
		return "", "", false // a stray bracket
	}
	return host, hostport[i+1:], true
}

// joinHostPort is net.JoinHostPort: host and port as "host:port", an IPv6 host in brackets.
func joinHostPort(host, port string) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
